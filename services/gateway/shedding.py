"""Shed excess load before doing any work for it.

When every decoder already has the gateway's `max_in_flight_per_decoder` calls, a new model
request (recommend, completions, chat, SGLang's /generate) would be refused by the pool anyway;
this middleware answers it 429 with `Retry-After` before the route parses and validates the
body, so refusing costs the gateway little CPU while it is busiest. The pool's own check stays
authoritative (a slot taken between here and the call is still a 429), so this is only the cheap
early path. The decoder sheds too, by predicted wait (its queued rows x steps against the
call's deadline): its RESOURCE_EXHAUSTED carries a `retry-after` from its queue, which becomes
the 429's Retry-After (`grpc_status.decoder_retry_after`).

The API key is checked first (the same constant-time compare as the route dependency, from
the `Authorization` header alone): a wrong or missing key gets its 401 whether or not the
decoders are full, never a 429 that invites it to retry. The body is still never read here.
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from widebeam.services.gateway.decoder_pool import DecoderPool
from widebeam.services.gateway.middleware import ROUTE_LABEL
from widebeam.services.http.api_keys import ApiKeyCheck

MODEL_ROUTES = frozenset({"/v1/recommend", "/v1/completions", "/v1/chat/completions", "/generate"})


class LoadShedMiddleware:
    def __init__(self, app: ASGIApp, pool: DecoderPool, api_keys: ApiKeyCheck) -> None:
        self.app = app
        self.pool = pool
        self.api_keys = api_keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope["method"] == "POST"
            and scope["path"] in MODEL_ROUTES
            and self.pool.saturated()
        ):
            scope[ROUTE_LABEL] = scope["path"]  # not routed, but counted under its route
            if self.api_keys.header_ok(Headers(scope=scope).get("authorization")):
                error = self.pool.saturated_error()
            else:
                error = self.api_keys.rejection()
            await error.response()(scope, receive, send)
            return
        await self.app(scope, receive, send)
