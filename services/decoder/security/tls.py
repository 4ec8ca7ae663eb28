"""TLS credentials of the decoder's gRPC port from PEM files: the server's certificate and key,
optionally a CA its clients' certificates must chain to (mutual TLS); a client's CA to verify
the server and, for mutual TLS, its own certificate and key. Files are read and checked when
the settings are built, so a missing or wrong one stops a process at start-up, naming it."""

from __future__ import annotations

from pathlib import Path

import grpc

_PEM_MARKER = b"-----BEGIN "


def read_pem(path: Path, setting: str) -> bytes:
    """The file's bytes; a ValueError naming `setting` when unreadable or not PEM."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ValueError(f"{setting} {str(path)!r} cannot be read: {exc}") from None
    if _PEM_MARKER not in data:
        raise ValueError(f"{setting} {str(path)!r} is not a PEM file (no '-----BEGIN' line)")
    return data


def server_credentials(cert: bytes, key: bytes, client_ca: bytes | None) -> grpc.ServerCredentials:
    """TLS with this certificate chain; with `client_ca`, clients must present a certificate
    it signed (a handshake without one fails before any call)."""
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=client_ca, require_client_auth=client_ca is not None
    )


def channel_credentials(
    ca: bytes, cert: bytes | None, key: bytes | None
) -> grpc.ChannelCredentials:
    """TLS that trusts `ca` for the server's certificate, presenting `cert` when given."""
    return grpc.ssl_channel_credentials(
        root_certificates=ca, private_key=key, certificate_chain=cert
    )
