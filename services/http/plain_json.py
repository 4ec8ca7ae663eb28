"""Route answers built of JSON types only (dict, list, str, int, float, bool, None), sent as
they are.

A dict returned without a `response_model` is walked by FastAPI's `jsonable_encoder` before
`json.dumps`: pure-Python work per value, which for the OpenAI and SGLang routes' n choices
costs more than building them (`bench/gateway_json.py`: a 1,000-choice chat completion 48 ms
through FastAPI's rendering, 10.5 ms with this, on one core). Those routes build their answers
from plain values, so they skip the walk. (`/v1/recommend` keeps its `response_model`:
pydantic's validation and serialisation run in Rust, 4.1 against 2.5 ms at n = 1000.)
"""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse


def plain_json(content: Any, status_code: int = 200) -> JSONResponse:
    """`content` as the JSON body (NaN and infinities are refused, as FastAPI's own
    rendering refuses them)."""
    return JSONResponse(content, status_code=status_code)
