"""`KeyBeforeBodyMiddleware`: a request that needs an API key and carries a body is answered
401 from its headers alone when the key is missing or wrong, before anything reads the body.

FastAPI reads a route's body before it runs the route's dependencies, and a body-size limit
reads it even earlier; without this, anyone could make a service buffer bodies up to its size
limit (and hold them, sending the last byte never) without a key. The route dependency stays
the authority for the routes (and for requests without a body); this is the same check
(`ApiKeyCheck.header_ok`), earlier. It does nothing when no keys are configured."""

from __future__ import annotations

from collections.abc import Callable

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from widebeam.services.http.api_keys import ApiKeyCheck

NeedsKey = Callable[[Scope], bool]


class KeyBeforeBodyMiddleware:
    def __init__(self, app: ASGIApp, api_keys: ApiKeyCheck, needs_key: NeedsKey) -> None:
        self.app = app
        self.api_keys = api_keys
        self.needs_key = needs_key  # (ASGI scope) -> whether its route needs a key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not self.api_keys.open:
            headers = Headers(scope=scope)
            if (
                _has_body(headers)
                and self.needs_key(scope)
                and not self.api_keys.header_ok(headers.get("authorization"))
            ):
                await self.api_keys.rejection().response()(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _has_body(headers: Headers) -> bool:
    length = headers.get("content-length")
    return "transfer-encoding" in headers or (length is not None and length.strip() != "0")
