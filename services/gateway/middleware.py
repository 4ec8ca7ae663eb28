"""ASGI middleware: request body size limit (413) and request metrics.

Plain ASGI rather than BaseHTTPMiddleware: the body limit has to see the raw `http.request`
messages (a chunked upload has no Content-Length), and the metrics should count the 413s too."""

from __future__ import annotations

import json
import time
from abc import ABC, abstractmethod
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from widebeam.services.gateway.metrics import GatewayMetrics
from widebeam.services.http.errors import ApiError

# Scope key: the route template of a request answered before routing (load shedding).
ROUTE_LABEL = "widebeam.route"
# scope key set when a handler was cancelled because its client disconnected; counted as 499
# (nginx's "client closed request"), not as the 500 of a handler that died
CLIENT_GONE = "widebeam.client_gone"
CLIENT_GONE_STATUS = 499


class HttpOnlyMiddleware(ABC):
    """Plain ASGI middleware that looks at HTTP requests only: any other scope (lifespan) goes
    straight to the app."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.handle(scope, receive, send)

    @abstractmethod
    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        """One HTTP request."""


class BodyLimitMiddleware(HttpOnlyMiddleware):
    """Reject bodies over `max_bytes` before the app parses anything. The body is read here in
    full (it is at most `max_bytes`) and replayed to the app."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        super().__init__(app)
        self.max_bytes = max_bytes

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None:
            if not declared.isdigit():
                await _send_error(send, ApiError(400, "invalid Content-Length", "invalid_header"))
                return
            if int(declared) > self.max_bytes:
                await _send_error(send, self._too_large())
                return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # client went away: nothing to answer
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await _send_error(send, self._too_large())
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: wait for the disconnect, as usual

        await self.app(scope, replay, send)

    def _too_large(self) -> ApiError:
        return ApiError(
            413, f"request body is larger than {self.max_bytes} bytes", "request_too_large"
        )


class MetricsMiddleware(HttpOnlyMiddleware):
    """Requests by route template (not raw path: unknown paths must not grow the label set),
    method and status, and latency per route."""

    def __init__(self, app: ASGIApp, metrics: GatewayMetrics) -> None:
        super().__init__(app)
        self.metrics = metrics

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        status = 500  # if the app dies before answering

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            if scope.get(CLIENT_GONE):
                status = CLIENT_GONE_STATUS
            route = scope.get("route")
            path = getattr(route, "path", None) or scope.get(ROUTE_LABEL) or "unmatched"
            self.metrics.requests.labels(path, scope["method"], str(status)).inc()
            self.metrics.latency.labels(path).observe(time.perf_counter() - started)


async def _send_error(send: Send, error: ApiError) -> None:
    body = json.dumps(error.body()).encode()
    headers: list[Any] = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
