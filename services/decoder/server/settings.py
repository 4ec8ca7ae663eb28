"""Decoder service settings: CLI flags override `WIDEBEAM_DECODER_*` environment variables."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


class DecoderSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="WIDEBEAM_DECODER_", extra="forbid", env_ignore_empty=True
    )

    model: str = Field(description="HF model directory (config.json + safetensors + tokenizer)")
    sid_layout: str | None = Field(None, description="BASE:SIZE,...; default: from the tokenizer")
    device: str = "cpu"
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    host: str = "127.0.0.1"
    port: int = Field(50051, ge=0, le=65535, description="0 picks a free port (logged)")
    # Catalogs: a JSONL file served as "default", and/or the ones followed in Redis.
    catalog_file: str | None = None
    redis_url: str | None = None
    catalogs: Annotated[list[str] | None, NoDecode] = Field(
        None, description="catalog names to follow in Redis (comma-separated); default: all"
    )
    catalog_namespace: str = "widebeam"
    max_rows: int = Field(1024, ge=1)
    max_kv_slots: int = Field(1 << 18, ge=16)
    max_model_len: int | None = Field(None, ge=2)
    max_waiting: int = Field(
        256, ge=1, description="queued requests beyond this: RESOURCE_EXHAUSTED"
    )
    max_message_bytes: int = Field(16 << 20, ge=1024)
    grace_period_s: float = Field(
        10.0, ge=0, description="in-flight RPCs get this long at shutdown"
    )
    log_level: str = "INFO"

    @field_validator("catalogs", mode="before")
    @classmethod
    def _split_names(cls, value: object) -> object:
        if isinstance(value, str):
            names = [n.strip() for n in value.split(",") if n.strip()]
            return names or None
        return value
