"""Decoder service settings: CLI flags override `WIDEBEAM_DECODER_*` environment variables.

The engine's settings are not listed here: one per `EngineConfig` field, derived from
`dataclasses.fields(EngineConfig)` (type, default, help), under the field's name except where
`ENGINE_SETTING_NAMES` gives the service's own. `DecoderSettings.engine_config()` builds the
`EngineConfig` from them, and building the settings runs its checks, so a bad value is
reported at start-up with the others, before the model loads.

Who may call (`auth_token[_file]`, the TLS files) and what one request may ask for (the
`max_*` request limits, enforced by `request_limits.py` whoever calls) are settings too.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Any, get_origin, get_type_hints

import grpc
from pydantic import (
    BeforeValidator,
    Field,
    PrivateAttr,
    create_model,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticUndefined
from pydantic_settings import NoDecode, SettingsConfigDict

from widebeam.services.decoder.config import EngineConfig
from widebeam.services.decoder.security.bearer_token import TokenSettings
from widebeam.services.decoder.security.tls import read_pem, server_credentials

# EngineConfig field -> its setting, where the service's name differs from the engine's.
_RENAMED = {"model_dir": "model", "catalog_path": "catalog_file"}
# Every EngineConfig field -> the DecoderSettings field (and WIDEBEAM_DECODER_* variable).
ENGINE_SETTING_NAMES: dict[str, str] = {
    f.name: _RENAMED.get(f.name, f.name) for f in dataclasses.fields(EngineConfig)
}


def _comma_separated(value: object) -> object:
    """A tuple setting given as text (a flag, an environment variable): `50,512`."""
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    return value


def _engine_fields() -> dict[str, Any]:
    hints = get_type_hints(EngineConfig)
    defined: dict[str, Any] = {}
    for f in dataclasses.fields(EngineConfig):
        default = PydanticUndefined if f.default is dataclasses.MISSING else f.default
        described = Field(default, description=f.metadata["help"])
        hint = hints[f.name]
        if get_origin(hint) is tuple:
            hint = Annotated[hint, NoDecode, BeforeValidator(_comma_separated)]
        defined[ENGINE_SETTING_NAMES[f.name]] = (hint, described)
    return defined


# Over TokenSettings: the decoder reads the bearer token its clients send (`auth_token[_file]`).
_EngineSettings = create_model("_EngineSettings", __base__=TokenSettings, **_engine_fields())


class DecoderSettings(_EngineSettings):
    model_config = SettingsConfigDict(
        env_prefix="WIDEBEAM_DECODER_", extra="forbid", env_ignore_empty=True
    )

    host: str = Field("127.0.0.1", description="bind address")
    port: int = Field(50051, ge=0, le=65535, description="port (0: a free one, logged)")
    # Catalogs: the engine's `catalog_file` and/or the ones followed in Redis.
    redis_url: str | None = Field(None, description="follow catalogs published in this Redis")
    catalogs: Annotated[list[str] | None, NoDecode] = Field(
        None, description="catalog names to follow in Redis (comma-separated); default: all"
    )
    catalog_namespace: str = Field("widebeam", description="Redis key namespace of the catalogs")
    max_waiting: int = Field(
        256, ge=1, description="queued requests beyond this: RESOURCE_EXHAUSTED"
    )
    max_queue_wait_s: float | None = Field(
        None,
        ge=0,
        description="refuse at once (RESOURCE_EXHAUSTED, with a Retry-After) a request whose "
        "predicted queue wait exceeds this; the caller's deadline bounds its predicted finish "
        "either way; default: no bound of the decoder's own",
    )
    answers_at_step_start: bool = Field(
        False,
        description="send each answer during the step that reads its flags, right after "
        "that step's decode is launched (with answers_after_launch off: before its forwards), "
        "so a closed loop's next request can arrive before the next step; default: when the "
        "step returns",
    )
    group_wait_ms: float = Field(
        0.0,
        ge=0,
        le=1000,
        description="after k answers left together, the next admission waits up to this long "
        "until k requests have arrived since (a closed loop's group stays one batch); 0: off",
    )
    metrics_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="serve Prometheus /metrics on this port, on host (0: a free one, logged); "
        "default: no metrics endpoint",
    )
    profile_dir: Path | None = Field(
        None,
        description="on SIGUSR1 start a device timeline of the engine (torch profiler), on the "
        "next SIGUSR1 stop it and write its summary here (timeline-<k>.json: device busy share, "
        "idle time by engine phase, top kernels); default: off",
    )
    max_message_bytes: int = Field(16 << 20, ge=1024, description="gRPC message size limit")
    api_processes: int = Field(
        0,
        ge=0,
        le=64,
        description="processes serving the gRPC port, apart from the engine's (parsing, "
        "validation, responses; over a Unix socket to the engine's process); 0: the engine's "
        "process serves it",
    )
    grace_period_s: float = Field(10.0, ge=0, description="seconds in-flight RPCs get at shutdown")
    log_level: str = Field("INFO", description="DEBUG, INFO, WARNING, ...")
    # TLS: the port serves TLS only with a certificate; with a client CA, mutual TLS.
    tls_cert_file: Path | None = Field(None, description="TLS: this server's certificate chain")
    tls_key_file: Path | None = Field(None, description="TLS: this server's private key (PEM)")
    tls_client_ca_file: Path | None = Field(
        None, description="mutual TLS: clients must present a certificate this CA signed (PEM)"
    )
    # What one request may ask for, whoever sends it (the gateway holds its own, lower ones).
    max_beam_width: int | None = Field(
        None, ge=1, description="widest beam_width one request may ask for (default: max_rows)"
    )
    max_n: int | None = Field(
        None, ge=1, description="most results (n) one request may ask for (default: max_beam_width)"
    )
    max_prompt_tokens: int | None = Field(
        None,
        ge=1,
        description="longest prompt in tokens, Generate's input_ids or Recommend's history "
        "prompt (default: the context length)",
    )
    max_history_items: int | None = Field(
        None,
        ge=1,
        description="longest Recommend history in items (default: max_prompt_tokens, as every "
        "item takes a token at least)",
    )
    max_exclude_ids: int = Field(
        100_000, ge=0, description="most exclude_item_ids one Recommend may give"
    )
    _tls: grpc.ServerCredentials | None = PrivateAttr(None)

    @field_validator("catalogs", mode="before")
    @classmethod
    def _split_names(cls, value: object) -> object:
        if isinstance(value, str):
            names = [n.strip() for n in value.split(",") if n.strip()]
            return names or None
        return value

    @model_validator(mode="after")
    def _check_engine(self) -> DecoderSettings:
        self.engine_config()  # its ValueError names the field
        return self

    @model_validator(mode="after")
    def _check_beam_limit(self) -> DecoderSettings:
        if self.max_beam_width is not None and self.max_beam_width > self.max_rows:
            raise ValueError(
                f"max_beam_width ({self.max_beam_width}) exceeds max_rows ({self.max_rows}): "
                "a beam that wide could never be admitted"
            )
        return self

    @model_validator(mode="after")
    def _read_tls_files(self) -> DecoderSettings:
        cert, key, client_ca = self.tls_cert_file, self.tls_key_file, self.tls_client_ca_file
        if (cert is None) != (key is None):
            raise ValueError("tls_cert_file and tls_key_file go together")
        if cert is None or key is None:
            if client_ca is not None:
                raise ValueError("tls_client_ca_file needs tls_cert_file and tls_key_file")
            return self
        self._tls = server_credentials(
            read_pem(cert, "tls_cert_file"),
            read_pem(key, "tls_key_file"),
            None if client_ca is None else read_pem(client_ca, "tls_client_ca_file"),
        )
        return self

    @property
    def server_credentials(self) -> grpc.ServerCredentials | None:
        """TLS credentials of the port; None: plaintext."""
        return self._tls

    def engine_config(self) -> EngineConfig:
        return EngineConfig(
            **{field: getattr(self, name) for field, name in ENGINE_SETTING_NAMES.items()}
        )
