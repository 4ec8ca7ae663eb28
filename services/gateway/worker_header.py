"""`X-Widebeam-Gateway-Worker` on every HTTP answer of a gateway run with `--workers N`: which of
the N processes answered (0 .. N-1), so an operator can see how connections spread over them.
A worker number, not a pid: it says nothing about the host to a client."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

WORKER_HEADER = "x-widebeam-gateway-worker"


class WorkerHeaderMiddleware:
    def __init__(self, app: ASGIApp, worker: int) -> None:
        self.app = app
        self.header = (WORKER_HEADER.encode(), str(worker).encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_header(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = message | {"headers": [*message.get("headers", []), self.header]}
            await send(message)

        await self.app(scope, receive, send_with_header)
