"""Stop decoding for a client that went away.

A model route's handler awaits its decoder call for as long as decoding takes, and an ASGI
server does not cancel a handler when its client disconnects: the decoder would go on
spending rows and steps on an answer nobody reads (a client that times out, a load balancer
that gave up, a user who closed the page). Once the request's body has been read, this
middleware waits on the connection too; when the client disconnects before the response has
been sent, it cancels the handler, which cancels its gRPC call, which aborts the request in
the decoder's engine (freeing its rows and KV at the next step). Such a request is counted
with status 499 (`middleware.CLIENT_GONE`, nginx's "client closed request").
"""

from __future__ import annotations

import asyncio
import contextlib

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from widebeam.services.gateway.middleware import CLIENT_GONE
from widebeam.services.gateway.shedding import MODEL_ROUTES


class CancelOnDisconnectMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not (
            scope["type"] == "http" and scope["method"] == "POST" and scope["path"] in MODEL_ROUTES
        ):
            await self.app(scope, receive, send)
            return
        body_read = asyncio.Event()
        gone = asyncio.Event()
        responded = False

        async def app_receive() -> Message:
            if body_read.is_set():  # later reads (a disconnect check) hear what the watch hears
                await gone.wait()
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.disconnect":
                gone.set()
            if message["type"] == "http.disconnect" or not message.get("more_body", False):
                body_read.set()
            return message

        async def app_send(message: Message) -> None:
            nonlocal responded
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                responded = True
            await send(message)

        handler = asyncio.ensure_future(self.app(scope, app_receive, app_send))
        watch = asyncio.ensure_future(_watch(receive, body_read, gone))
        try:
            await asyncio.wait({handler, watch}, return_when=asyncio.FIRST_COMPLETED)
            if not handler.done() and gone.is_set() and not responded:
                scope[CLIENT_GONE] = True
                handler.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await handler
                return
            await handler
        finally:
            watch.cancel()
            handler.cancel()  # only when this task itself is cancelled while waiting


async def _watch(receive: Receive, body_read: asyncio.Event, gone: asyncio.Event) -> None:
    """After the body: the server's next message is the disconnect (or, once the response is
    complete, its own end of the request)."""
    await body_read.wait()
    if gone.is_set():
        return
    while (await receive())["type"] != "http.disconnect":
        pass  # a server may hand over body chunks the handler left unread
    gone.set()
