"""`StrictJsonRoute`: FastAPI routes whose JSON body is read by `strict_json`, not the standard
library's lenient parser (which FastAPI calls otherwise).

The body is parsed once, before FastAPI's own handling: what `strict_json` refuses (duplicate
keys, NaN/Infinity, an integer of thousands of digits, nesting too deep for the parser) is a 400
`invalid_json` naming the problem, and the route's handler then gets the parsed value from
`Request.json()` as usual. Bodies of other content types are left to FastAPI; should it read one
as JSON all the same (no content type, when the route allows that), `json()` parses it strictly
then, and FastAPI answers its own 400. A router uses it as `APIRouter(route_class=...)`."""

from __future__ import annotations

import email.message
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute

from widebeam.services.http import strict_json
from widebeam.services.http.errors import ApiError

Handler = Callable[[Request], Coroutine[Any, Any, Response]]


def is_json_content_type(content_type: str | None) -> bool:
    """`application/json` or `application/*+json`, as FastAPI tells them apart."""
    if not content_type:
        return False
    message = email.message.Message()
    message["content-type"] = content_type
    subtype = message.get_content_subtype()
    return message.get_content_maintype() == "application" and (
        subtype == "json" or subtype.endswith("+json")
    )


class StrictJsonRequest(Request):
    """A request whose `json()` is the body `parse_json` decoded strictly."""

    _strict_json: Any

    async def parse_json(self) -> None:
        self._strict_json = strict_json.loads(await self.body())

    async def json(self) -> Any:
        if not hasattr(self, "_strict_json"):
            await self.parse_json()
        return self._strict_json


def invalid_json(error: strict_json.StrictJsonError) -> ApiError:
    """The 400 of a body `strict_json` refuses (`param`: the duplicated key, if that is it)."""
    return ApiError(400, f"malformed JSON body: {error}", "invalid_json", param=error.key)


class StrictJsonRoute(APIRoute):
    def get_route_handler(self) -> Handler:
        handler = super().get_route_handler()

        async def strict_json_handler(request: Request) -> Response:
            strict = StrictJsonRequest(request.scope, request.receive)
            if is_json_content_type(strict.headers.get("content-type")) and await strict.body():
                try:
                    await strict.parse_json()
                except strict_json.StrictJsonError as exc:
                    return invalid_json(exc).response()
            return await handler(strict)

        return strict_json_handler
