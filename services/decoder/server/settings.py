"""Decoder service settings: CLI flags override `WIDEBEAM_DECODER_*` environment variables.

The engine's settings are not listed here: one per `EngineConfig` field, derived from
`dataclasses.fields(EngineConfig)` (type, default, help), under the field's name except where
`ENGINE_SETTING_NAMES` gives the service's own. `DecoderSettings.engine_config()` builds the
`EngineConfig` from them, and building the settings runs its checks, so a bad value is
reported at start-up with the others, before the model loads.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any, get_type_hints

from pydantic import Field, create_model, field_validator, model_validator
from pydantic_core import PydanticUndefined
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from widebeam.services.decoder.config import EngineConfig

# EngineConfig field -> its setting, where the service's name differs from the engine's.
_RENAMED = {"model_dir": "model", "catalog_path": "catalog_file"}
# Every EngineConfig field -> the DecoderSettings field (and WIDEBEAM_DECODER_* variable).
ENGINE_SETTING_NAMES: dict[str, str] = {
    f.name: _RENAMED.get(f.name, f.name) for f in dataclasses.fields(EngineConfig)
}


def _engine_fields() -> dict[str, Any]:
    hints = get_type_hints(EngineConfig)
    defined: dict[str, Any] = {}
    for f in dataclasses.fields(EngineConfig):
        default = PydanticUndefined if f.default is dataclasses.MISSING else f.default
        described = Field(default, description=f.metadata["help"])
        defined[ENGINE_SETTING_NAMES[f.name]] = (hints[f.name], described)
    return defined


_EngineSettings = create_model("_EngineSettings", __base__=BaseSettings, **_engine_fields())


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
    max_message_bytes: int = Field(16 << 20, ge=1024, description="gRPC message size limit")
    grace_period_s: float = Field(10.0, ge=0, description="seconds in-flight RPCs get at shutdown")
    log_level: str = Field("INFO", description="DEBUG, INFO, WARNING, ...")

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

    def engine_config(self) -> EngineConfig:
        return EngineConfig(
            **{field: getattr(self, name) for field, name in ENGINE_SETTING_NAMES.items()}
        )
