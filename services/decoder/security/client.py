"""How a client reaches the decoder: its settings and the channels they give.

`DecoderClientSettings` reads the shared token (`WIDEBEAM_DECODER_AUTH_TOKEN[_FILE]`) and the
client's TLS files (`WIDEBEAM_DECODER_CLIENT_TLS_*`); `ChannelSecurity` opens channels that
carry them: TLS when a CA is given (with a client certificate for mutual TLS), and the token
as `authorization: Bearer` metadata on every unary call (the Decoder RPCs all are). Used by the
gateway's pool, the batch worker and the benches, so they agree with the decoder's settings."""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from pydantic import Field, PrivateAttr, ValidationError, model_validator
from pydantic_settings import SettingsConfigDict

from widebeam.services.decoder.security.bearer_token import (
    ENV_PREFIX,
    METADATA_KEY,
    TokenSettings,
    bearer,
)
from widebeam.services.decoder.security.tls import channel_credentials, read_pem

ChannelOptions = Sequence[tuple[str, Any]]


class _SyncCallDetails(
    namedtuple(
        "_SyncCallDetails",
        ("method", "timeout", "metadata", "credentials", "wait_for_ready", "compression"),
    ),
    grpc.ClientCallDetails,
):
    """grpc.ClientCallDetails is abstract; a blocking interceptor passes on one of these."""


class _AioBearer(grpc.aio.UnaryUnaryClientInterceptor):
    def __init__(self, value: str) -> None:
        self._pair = (METADATA_KEY, value)

    async def intercept_unary_unary(
        self, continuation: Callable[..., Any], details: grpc.aio.ClientCallDetails, request: Any
    ) -> Any:
        metadata = grpc.aio.Metadata(*(details.metadata or ()), self._pair)
        return await continuation(details._replace(metadata=metadata), request)


class _SyncBearer(grpc.UnaryUnaryClientInterceptor):
    def __init__(self, value: str) -> None:
        self._pair = (METADATA_KEY, value)

    def intercept_unary_unary(
        self, continuation: Callable[..., Any], details: grpc.ClientCallDetails, request: Any
    ) -> Any:
        with_token = _SyncCallDetails(
            details.method,
            details.timeout,
            [*(details.metadata or ()), self._pair],
            details.credentials,
            getattr(details, "wait_for_ready", None),
            getattr(details, "compression", None),
        )
        return continuation(with_token, request)


@dataclass(frozen=True)
class ChannelSecurity:
    """What a decoder channel carries; the default is plaintext without a token."""

    token: str | None = field(default=None, repr=False)  # never in a log or a traceback
    tls: grpc.ChannelCredentials | None = None
    server_name: str | None = None  # the name the server's certificate must hold

    @classmethod
    def from_env(cls) -> ChannelSecurity:
        """From the environment; a bad value is a ValueError naming it (never its secret)."""
        try:
            settings = DecoderClientSettings()
        except ValidationError as exc:
            problems = "; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors())
            raise ValueError(
                f"invalid decoder client settings: {problems} (WIDEBEAM_DECODER_AUTH_TOKEN"
                "[_FILE], WIDEBEAM_DECODER_CLIENT_TLS_*)"
            ) from None
        return settings.security()

    def _options(self, options: ChannelOptions) -> list[tuple[str, Any]]:
        if self.tls is not None and self.server_name:
            return [*options, ("grpc.ssl_target_name_override", self.server_name)]
        return list(options)

    def aio_channel(self, address: str, options: ChannelOptions = ()) -> grpc.aio.Channel:
        interceptors = [_AioBearer(bearer(self.token))] if self.token else None
        opts = self._options(options)
        if self.tls is not None:
            return grpc.aio.secure_channel(address, self.tls, opts, interceptors=interceptors)
        return grpc.aio.insecure_channel(address, opts, interceptors=interceptors)

    def channel(self, address: str, options: ChannelOptions = ()) -> grpc.Channel:
        """A blocking channel (scripts, benches)."""
        opts = self._options(options)
        if self.tls is not None:
            channel = grpc.secure_channel(address, self.tls, opts)
        else:
            channel = grpc.insecure_channel(address, opts)
        if self.token:
            return grpc.intercept_channel(channel, _SyncBearer(bearer(self.token)))
        return channel


class DecoderClientSettings(TokenSettings):
    """A decoder client's settings; the server's `WIDEBEAM_DECODER_*` variables are ignored."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", env_ignore_empty=True)

    client_tls_ca_file: Path | None = Field(
        None, description="TLS to the decoder: the CA its certificate must chain to (PEM)"
    )
    client_tls_cert_file: Path | None = Field(
        None, description="mutual TLS: this client's certificate chain (PEM)"
    )
    client_tls_key_file: Path | None = Field(
        None, description="mutual TLS: this client's private key (PEM)"
    )
    client_tls_server_name: str | None = Field(
        None, description="name the decoder's certificate must hold (default: the address's host)"
    )
    _tls: grpc.ChannelCredentials | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _read_tls_files(self) -> DecoderClientSettings:
        cert, key = self.client_tls_cert_file, self.client_tls_key_file
        if (cert is None) != (key is None):
            raise ValueError("client_tls_cert_file and client_tls_key_file go together")
        if self.client_tls_ca_file is None:
            if cert is not None:
                raise ValueError("a client certificate needs client_tls_ca_file (TLS) too")
            return self
        self._tls = channel_credentials(
            read_pem(self.client_tls_ca_file, "client_tls_ca_file"),
            None if cert is None else read_pem(cert, "client_tls_cert_file"),
            None if key is None else read_pem(key, "client_tls_key_file"),
        )
        return self

    def security(self) -> ChannelSecurity:
        return ChannelSecurity(self.token, self._tls, self.client_tls_server_name)
