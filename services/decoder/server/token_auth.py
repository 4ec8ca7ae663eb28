"""The bearer-token check of the decoder's gRPC port.

With a token configured, every call must carry `authorization: Bearer <token>` metadata, or
it is answered UNAUTHENTICATED before its request is parsed. The comparison is constant-time
(`hmac.compare_digest`). Health (`grpc.health.v1`) stays open: probes (Docker, Kubernetes'
gRPC probe) cannot send metadata, and it tells only SERVING or NOT_SERVING. Reflection needs
the token like the Decoder service. Refused calls are logged at most once a minute, with how
many there were, so a flood of them cannot flood the log; the token presented is never logged."""

from __future__ import annotations

import hmac
import logging
import time
from typing import Any

import grpc

from widebeam.services.decoder.security.bearer_token import METADATA_KEY, SCHEME
from widebeam.services.decoder.server.handler_interceptor import HandlerInterceptor

log = logging.getLogger(__name__)

OPEN_PREFIXES = ("/grpc.health.v1.Health/",)
LOG_INTERVAL_S = 60.0
REFUSED = (
    f"missing or wrong decoder token: send metadata '{METADATA_KEY}: {SCHEME} <token>' "
    "(the decoder's WIDEBEAM_DECODER_AUTH_TOKEN)"
)


def presented_token(metadata: tuple[tuple[str, str | bytes], ...] | None) -> bytes | None:
    """The token of the call's one `authorization: Bearer` value; None when absent or
    ambiguous (several values, another scheme)."""
    values = [v for k, v in metadata or () if k == METADATA_KEY]
    if len(values) != 1:
        return None
    value = values[0] if isinstance(values[0], bytes) else values[0].encode()
    scheme, _, token = value.partition(b" ")
    if scheme.lower() != SCHEME.lower().encode() or not token:
        return None
    return token


class _RefusalLog:
    """The first refused call, then one line per LOG_INTERVAL_S with the count since."""

    def __init__(self) -> None:
        self.count = 0
        self.logged_at: float | None = None

    def refused(self, method: str) -> None:
        self.count += 1
        now = time.monotonic()
        if self.logged_at is None or now - self.logged_at >= LOG_INTERVAL_S:
            log.warning(
                "refused %d call(s) without the decoder token (latest: %s)", self.count, method
            )
            self.count, self.logged_at = 0, now


class TokenAuthInterceptor(HandlerInterceptor):
    def __init__(self, token: str) -> None:
        self._expected = token.encode()
        self._log = _RefusalLog()

    def allowed(self, details: grpc.HandlerCallDetails) -> bool:
        if details.method.startswith(OPEN_PREFIXES):
            return True
        token = presented_token(details.invocation_metadata)
        return token is not None and hmac.compare_digest(token, self._expected)

    def serving(
        self, handler: grpc.RpcMethodHandler, details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler:
        if self.allowed(details):
            return handler
        self._log.refused(details.method)
        return _refusing(handler)


async def _abort(context: grpc.aio.ServicerContext) -> None:
    await context.abort(grpc.StatusCode.UNAUTHENTICATED, REFUSED)


def _refusing(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """A handler of the same kind as `handler` that answers UNAUTHENTICATED, never parsing the
    request (no deserializer: the bytes are dropped)."""

    async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await _abort(context)

    async def streaming(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await _abort(context)
        yield  # unreachable: makes this an async generator, the streaming handlers' shape

    serializer = handler.response_serializer
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(unary, response_serializer=serializer)
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(streaming, response_serializer=serializer)
    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(unary, response_serializer=serializer)
    return grpc.stream_stream_rpc_method_handler(streaming, response_serializer=serializer)
