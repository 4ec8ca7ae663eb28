"""Gateway settings: CLI flags override `WIDEBEAM_GATEWAY_*` environment variables."""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from widebeam.services.comma_separated import split_commas
from widebeam.services.http.client_guard_settings import ClientGuardSettings

# `default_constrained` entry meaning every name the gateway serves.
ALL_MODEL_NAMES = "*"
# The event loops a gateway process can run (uvicorn's names for them).
EventLoop = Literal["asyncio", "uvloop"]
EVENT_LOOPS: tuple[str, ...] = get_args(EventLoop)


class GatewaySettings(ClientGuardSettings):
    model_config = SettingsConfigDict(
        env_prefix="WIDEBEAM_GATEWAY_", extra="forbid", env_ignore_empty=True
    )

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535, description="0 picks a free port (logged)")
    decoders: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["127.0.0.1:50051"],
        description="decoder gRPC addresses HOST:PORT (comma-separated)",
    )
    redis_url: str | None = Field(None, description="Redis of the batch jobs (optional)")
    # NoDecode: the variable holds comma-separated keys, not JSON. Empty = no authentication.
    api_keys: Annotated[list[SecretStr], NoDecode] = Field(default_factory=list)

    # Limits on what one request may ask for.
    max_beam_width: int = Field(512, ge=1)
    max_n: int = Field(
        512, ge=1, description="most items / choices per request (default: max_beam_width)"
    )
    max_history: int = Field(1000, ge=1)
    max_exclude: int = Field(
        10_000, ge=0, description="/v1/recommend (and batch row) exclude ids per request"
    )
    max_tokens: int = Field(1024, ge=1)
    max_body_bytes: int = Field(4 << 20, ge=1024)
    max_prompt_chars_per_token: int = Field(
        32,
        ge=1,
        description="a text prompt (or chat messages) over max_model_len x this many characters "
        "is refused before it is tokenized (tokenizing megabytes takes seconds)",
    )
    default_beam_width: int = Field(64, ge=1, description="/v1/recommend beam when not given")

    # Decoder calls.
    request_timeout_s: float = Field(30.0, gt=0, description="deadline of one HTTP request")
    retry_attempts: int = Field(3, ge=0, description="extra tries on another replica")
    retry_budget_s: float = Field(5.0, ge=0, description="no new try after this long")
    retry_after_s: int = Field(1, ge=1, description="Retry-After on 429 / 503")
    max_in_flight_per_decoder: int = Field(
        128,
        ge=1,
        description="Generate/Recommend calls one decoder gets from this gateway at once; "
        "beyond it on every replica: 429 with Retry-After at once (load shedding)",
    )
    info_poll_interval_s: float = Field(2.0, gt=0, description="GetInfo polling (metrics)")
    max_message_bytes: int = Field(64 << 20, ge=1024)

    # What /v1/models reports; default: the decoder's model name.
    model_name: str | None = None
    served_model_names: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="more names clients may give as `model` (comma-separated); /v1/models "
        "lists them after the model's own name",
    )
    default_constrained: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="served model names whose completions and chat requests are catalog-"
        "constrained unless they say constrained=false ('*': every name; comma-separated)",
    )
    # Tokenizer (chat template, text <-> ids); default: the decoder's model path, if readable.
    model_dir: str | None = None
    # The playground's item search and titles (GET /v1/items); the served catalog keeps no titles.
    items_file: str | None = Field(
        None,
        description="catalog file (any catalog format) whose items /v1/items searches by id "
        "or title (its `title` column); default: none, /v1/items answers 404",
    )
    workers: int = Field(
        1,
        ge=1,
        description="gateway processes serving the one port (SO_REUSEPORT), each with its own "
        "decoder pool, poller, metrics and limits (max_in_flight_per_decoder is per worker)",
    )
    server_timing: bool = Field(
        True,
        description="a Server-Timing header on every response: the gateway's time to the "
        "response's start (app) and its decoder calls' (decoder), for a client to see where "
        "its latency went; off hides the decoders' timing from callers",
    )
    event_loop: EventLoop = Field(
        "asyncio",
        description="each gateway process's event loop, which runs its HTTP server and its gRPC "
        "calls to the decoders: asyncio's own, or uvloop's (libuv)",
    )
    log_level: str = "INFO"

    @model_validator(mode="before")
    @classmethod
    def _max_n_follows_max_beam_width(cls, data: object) -> object:
        """Without a value of its own, max_n is max_beam_width, so n = beam_width is allowed at
        any width (SGLang's wide fan-out asks for n = beam)."""
        if isinstance(data, dict) and data.get("max_n") is None and "max_beam_width" in data:
            return data | {"max_n": data["max_beam_width"]}
        return data

    @field_validator(
        "decoders", "api_keys", "served_model_names", "default_constrained", mode="before"
    )
    @classmethod
    def _split_lists(cls, value: object) -> object:
        return split_commas(value)

    @model_validator(mode="after")
    def _default_constrained_names_are_served(self) -> GatewaySettings:
        served = {self.model_name, *self.served_model_names} - {None}
        unknown = sorted(set(self.default_constrained) - served - {ALL_MODEL_NAMES})
        if unknown:
            raise ValueError(
                f"default_constrained names {unknown} are not served model names "
                f"({sorted(served) or 'none configured'}); add them to served_model_names / "
                f"model_name, or give {ALL_MODEL_NAMES!r} for every name"
            )
        return self

    @field_validator("decoders")
    @classmethod
    def _need_decoders(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("at least one decoder address is required")
        bad = [a for a in value if a.rpartition(":")[0] == "" or not a.rpartition(":")[2].isdigit()]
        if bad:
            raise ValueError(f"decoder addresses must be HOST:PORT, got {bad}")
        return value

    def key_values(self) -> list[bytes]:
        return [key.get_secret_value().encode() for key in self.api_keys]
