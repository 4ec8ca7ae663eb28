"""Route answers built of JSON types only (dict, list, str, int, float, bool, None), sent as
they are.

A dict returned without a `response_model` is walked by FastAPI's `jsonable_encoder` before
`json.dumps`: pure-Python work per value, which for the OpenAI and SGLang routes' n choices
costs several times the dump itself (`bench/gateway_json.py` measures both). Those routes
build their answers from plain values, so they skip the walk, and are dumped by pydantic's
Rust serialiser. `/v1/recommend` too: its `response_model` (which documents the answer) would
validate one model object per item first (a 1,000-item answer 2.1 -> 1.2 ms on this project's
machine, `bench/gateway_json.py --n 1000`).
"""

from __future__ import annotations

from typing import Any

import pydantic_core
from fastapi.responses import JSONResponse

# How pydantic writes non-finite floats in its "constants" mode: JSON has no such values.
_NON_FINITE = (b"NaN", b"Infinity")


class PlainJSONResponse(JSONResponse):
    def render(self, content: Any) -> bytes:
        body = pydantic_core.to_json(content, inf_nan_mode="constants")
        if any(word in body for word in _NON_FINITE):
            # A non-finite float, or only a string holding one of the words: the standard
            # library tells them apart (it refuses the floats, as FastAPI's rendering does).
            return super().render(content)
        return body


def plain_json(content: Any, status_code: int = 200) -> JSONResponse:
    """`content` as the JSON body (NaN and infinities are refused, as FastAPI's own
    rendering refuses them)."""
    return PlainJSONResponse(content, status_code=status_code)
