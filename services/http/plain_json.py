"""Route answers built of JSON types only (dict, list, str, int, float, bool, None), sent as
they are.

A dict returned without a `response_model` is walked by FastAPI's `jsonable_encoder` before
`json.dumps`: pure-Python work per value, which for the OpenAI and SGLang routes' n choices
costs several times the dump itself (`bench/gateway_json.py` measures both). Those routes
build their answers from plain values, so they skip the walk. (`/v1/recommend` keeps its
`response_model`: pydantic validates and serialises it in Rust, close to the dump's cost.)
"""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse


def plain_json(content: Any, status_code: int = 200) -> JSONResponse:
    """`content` as the JSON body (NaN and infinities are refused, as FastAPI's own
    rendering refuses them)."""
    return JSONResponse(content, status_code=status_code)
