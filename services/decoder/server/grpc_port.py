"""The decoder's gRPC port as one process serves it: the Decoder service, health, reflection,
the token check and the message size limits; bound with TLS when a certificate is set.

The engine's own process serves it (`api_processes` 0), or each API process does.
"""

from __future__ import annotations

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2 as pb
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2_grpc as pb_grpc
from widebeam.services.decoder.server.servicer import DecoderServicer
from widebeam.services.decoder.server.settings import DecoderSettings
from widebeam.services.decoder.server.token_auth import TokenAuthInterceptor
from widebeam.services.decoder.server.wire import MalformedRequestInterceptor

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["Decoder"].full_name
ServingStatus = health_pb2.HealthCheckResponse.ServingStatus


def grpc_server(
    settings: DecoderSettings, servicer: DecoderServicer
) -> tuple[grpc.aio.Server, health.aio.HealthServicer]:
    """The server and its health servicer, not yet bound. Call inside the event loop that will
    run it: grpc.aio objects bind to the loop running at creation."""
    size = settings.max_message_bytes
    # The token check runs first: a call without it is refused before its bytes are parsed.
    interceptors: list[grpc.aio.ServerInterceptor] = [MalformedRequestInterceptor()]
    if settings.token is not None:
        interceptors.insert(0, TokenAuthInterceptor(settings.token))
    server = grpc.aio.server(
        interceptors=interceptors,
        options=[
            ("grpc.max_receive_message_length", size),
            ("grpc.max_send_message_length", size),
        ],
    )
    checks = health.aio.HealthServicer()
    pb_grpc.add_DecoderServicer_to_server(servicer, server)
    health_pb2_grpc.add_HealthServicer_to_server(checks, server)
    reflection.enable_server_reflection(
        (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    return server, checks


def bind(server: grpc.aio.Server, settings: DecoderSettings, port: int) -> int:
    """Listen on settings.host:port (gRPC sets SO_REUSEPORT: API processes share one port)."""
    address, tls = f"{settings.host}:{port}", settings.server_credentials
    try:
        if tls is None:
            return server.add_insecure_port(address)
        return server.add_secure_port(address, tls)
    except RuntimeError:
        raise ValueError(f"cannot listen on {address} (in use?)") from None


def security_words(settings: DecoderSettings) -> str:
    """How the port is secured, for the start-up log."""
    tls = settings.server_credentials
    kind = "plaintext" if tls is None else "mutual TLS" if settings.tls_client_ca_file else "TLS"
    token = "token required" if settings.token is not None else "no token"
    return f"{kind}, {token}"


async def set_health(checks: health.aio.HealthServicer, status: ServingStatus) -> None:
    for name in ("", SERVICE_NAME):
        await checks.set(name, status)
