"""`stream: true` on `/v1/completions` and `/v1/chat/completions`: the answer as Server-Sent
Events, shaped as FlashRec sends its beams.

Beam search ends before anything can be sent (the best beams are known only at the end), so a
stream is the finished response cut into OpenAI chunks: one chunk that carries every choice
(for chat, each choice's `delta` holds the whole message), then — when the request asked for
`stream_options.include_usage` — a chunk with no choices and the usage (`usage: null` on the
chunk before it, as OpenAI sends), then `data: [DONE]`. Errors are found before the first
byte, so they are ordinary JSON error responses with their 4xx/5xx status, never a half stream."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi.responses import StreamingResponse

SSE_MEDIA_TYPE = "text/event-stream"
DONE = b"data: [DONE]\n\n"


def event(payload: dict[str, Any]) -> bytes:
    return (
        b"data: "
        + json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
        + (b"\n\n")
    )


def chunks(response: dict[str, Any], chunk_object: str, include_usage: bool) -> list[bytes]:
    """The events of a finished `response` (an OpenAI body), each chunk `chunk_object`."""
    head = {key: value for key, value in response.items() if key != "usage"}
    head["object"] = chunk_object
    events = []
    if include_usage:
        events.append(event(head | {"usage": None}))
        tail = {key: head[key] for key in ("id", "object", "created", "model")}
        events.append(event(tail | {"choices": [], "usage": response["usage"]}))
    else:
        events.append(event(head))
    events.append(DONE)
    return events


def sse_response(
    response: dict[str, Any], chunk_object: str, include_usage: bool
) -> StreamingResponse:
    """`response` as a text/event-stream answer (see the module's docstring)."""
    events = chunks(response, chunk_object, include_usage)

    async def body() -> AsyncIterator[bytes]:
        for data in events:
            yield data

    # no-cache / no buffering: proxies pass the events on as they come.
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(body(), media_type=SSE_MEDIA_TYPE, headers=headers)


# OpenAPI: a streamed 200 is event-stream text (routes add it to their documented responses).
STREAM_RESPONSE_DOC: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "the response; with stream=true, Server-Sent Events",
        "content": {"application/json": {}, SSE_MEDIA_TYPE: {}},
    }
}
