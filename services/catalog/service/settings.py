"""Catalog service settings: CLI flags override `WIDEBEAM_CATALOG_*` environment variables.

Redis credentials and TLS travel in the URL (``redis://:PASSWORD@host:6379/0``,
``rediss://host:6380/0`` for TLS); :func:`redact_url` hides the password whenever the URL is
logged. The API key is a ``SecretStr`` so it never shows up in a repr or a log line.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import SettingsConfigDict

from widebeam.services.catalog.sid_layout import SidLayout
from widebeam.services.http.client_guard_settings import ClientGuardSettings


class CatalogSettings(ClientGuardSettings):
    model_config = SettingsConfigDict(
        env_prefix="WIDEBEAM_CATALOG_", extra="forbid", env_ignore_empty=True
    )

    host: str = "127.0.0.1"
    port: int = Field(8300, ge=0, le=65535, description="0 picks a free port (logged)")
    redis_url: str = Field(
        "redis://127.0.0.1:6379/0", description="redis:// or rediss:// (TLS); password in the URL"
    )
    namespace: str = Field("widebeam", description="Redis key namespace of the catalog store")
    api_key: SecretStr | None = Field(
        None, description="when set, POST routes need 'Authorization: Bearer <key>'"
    )
    max_upload_bytes: int = Field(
        1 << 30, ge=1, description="request body limit (as sent, i.e. compressed); beyond: 413"
    )
    max_inflated_bytes: int = Field(
        4 << 30, ge=1, description="limit on a catalog's uncompressed size (gzip bombs)"
    )
    max_items: int = Field(
        20_000_000, ge=1, description="most items of one catalog, checked as its rows are read"
    )
    spool_memory_bytes: int = Field(
        8 << 20, ge=0, description="uploads up to this size stay in memory, larger go to disk"
    )
    spool_dir: str | None = Field(None, description="temp directory for spooled uploads")
    retain: int = Field(5, ge=1, description="committed versions kept per catalog")
    max_concurrent_builds: int = Field(
        2, ge=1, description="parse+build jobs at once; more uploads wait (bounds peak memory)"
    )
    sid_layout: str | None = Field(
        None, description="default SID layout BASE:SIZE,...[;begin=ID;end=ID]"
    )
    model_dir: str | None = Field(
        None, description="default SID layout inferred from this model's tokenizer.json"
    )
    log_level: str = "INFO"

    # The catalog service's own default; the gateway keeps ClientGuardSettings' 5 s.
    keep_alive_timeout_s: float = Field(
        10.0, gt=0, description="an idle kept-alive connection is closed after this"
    )

    @field_validator("sid_layout")
    @classmethod
    def _check_layout(cls, value: str | None) -> str | None:
        if value:
            SidLayout.parse(value)  # fail at start-up, not on the first upload
        return value or None

    @field_validator("redis_url")
    @classmethod
    def _check_redis_url(cls, value: str) -> str:
        scheme = urlsplit(value).scheme
        if scheme not in ("redis", "rediss", "unix"):
            raise ValueError(
                f"redis_url must start with redis://, rediss:// or unix://, got {scheme!r}"
            )
        return value

    def default_layout(self) -> SidLayout | None:
        """The configured fallback layout: the explicit spec, else the model's tokenizer."""
        if self.sid_layout:
            return SidLayout.parse(self.sid_layout)
        if self.model_dir:
            layout = SidLayout.from_tokenizer(self.model_dir)
            if layout is None:
                raise ValueError(
                    f"model {self.model_dir!r}: its tokenizer has no <s_a_N> SID tokens"
                )
            return layout
        return None


def redact_url(url: str) -> str:
    """``url`` with any password replaced by ``***`` (safe to log)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if ":" in host:  # IPv6 literal: urlsplit dropped its brackets
        host = f"[{host}]"
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))
