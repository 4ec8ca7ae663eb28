"""What the OpenAI-compatible generation routes (`/v1/completions`, `/v1/chat/completions`)
share: their router (strict JSON bodies), their documented responses, and the answer as one
JSON body or, with `stream: true`, as Server-Sent Events. Routes import the module and call
`openai_route.post(...)`, `openai_route.answer(...)`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse, StreamingResponse

from widebeam.services.gateway.schemas.common import ERROR_RESPONSES
from widebeam.services.gateway.schemas.completions import BeamFields
from widebeam.services.gateway.streaming import STREAM_RESPONSE_DOC, sse_response
from widebeam.services.http.plain_json import plain_json
from widebeam.services.http.strict_json_route import StrictJsonRoute

Answer = JSONResponse | StreamingResponse


def new_router() -> APIRouter:
    return APIRouter(tags=["openai"], route_class=StrictJsonRoute)


def post(router: APIRouter, route: str, summary: str) -> Callable[..., Any]:
    """`router.post` for a generation route: its errors and its JSON-or-stream 200."""
    return router.post(
        route,
        responses=ERROR_RESPONSES | STREAM_RESPONSE_DOC,
        response_model=None,
        summary=summary,
    )


def answer(response: dict[str, Any], body: BeamFields, chunk_object: str) -> Answer:
    """`response` as the request asked: the JSON body, or its chunks as Server-Sent Events
    whose objects are named `chunk_object`."""
    if not body.stream:
        return plain_json(response)
    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    return sse_response(response, chunk_object, include_usage)
