"""Gateway settings: CLI flags override `WIDEBEAM_GATEWAY_*` environment variables."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


def _split_commas(value: object) -> object:
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


class GatewaySettings(BaseSettings):
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
    max_n: int = Field(128, ge=1)
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
    # Tokenizer (chat template, text <-> ids); default: the decoder's model path, if readable.
    model_dir: str | None = None
    log_level: str = "INFO"

    # Slow and hostile clients (widebeam.services.http.connections): deadlines, connection caps
    # and a log rate limit, so idle or dribbling connections cannot exhaust the server or its log.
    header_timeout_s: float = Field(
        10.0, gt=0, description="seconds a client has to send a request's headers; then 408, closed"
    )
    body_timeout_s: float = Field(
        30.0, gt=0, description="longest pause in a request body being read; then 408, closed"
    )
    keep_alive_timeout_s: float = Field(
        5.0, gt=0, description="an idle kept-alive connection is closed after this"
    )
    max_connections: int = Field(
        2048, ge=1, description="open connections in all; beyond: 503 (capped by ulimit -n)"
    )
    max_connections_per_client: int = Field(
        256,
        ge=1,
        description="open connections from one client address; beyond: 429 "
        "(behind a proxy, where all clients share its address: raise it to max_connections)",
    )
    log_rate_limit: int = Field(
        20, ge=1, description="log records of one kind let through per log_rate_interval_s"
    )
    log_rate_interval_s: float = Field(60.0, gt=0, description="window of log_rate_limit")

    @field_validator("decoders", mode="before")
    @classmethod
    def _split_decoders(cls, value: object) -> object:
        return _split_commas(value)

    @field_validator("api_keys", mode="before")
    @classmethod
    def _split_keys(cls, value: object) -> object:
        return _split_commas(value)

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
