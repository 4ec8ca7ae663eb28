"""Bodies shared by several routes."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel


def _encodable(value: str) -> str:
    # JSON may carry lone surrogates ("\\ud800"); they cannot reach protobuf or the tokenizer.
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("string is not valid Unicode (lone surrogate escape)") from None
    return value


Text = Annotated[str, AfterValidator(_encodable)]


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ErrorDetail(BaseModel):
    message: str
    type: str
    code: str
    param: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorDetail


# Documented on every /v1 route (the OpenAPI page at /docs shows them).
ERROR_RESPONSES: dict[int | str, dict[str, object]] = {
    400: {"model": ErrorResponse, "description": "invalid request (the message names the field)"},
    401: {"model": ErrorResponse, "description": "missing or invalid API key"},
    404: {"model": ErrorResponse, "description": "unknown catalog or model"},
    413: {"model": ErrorResponse, "description": "request body too large"},
    429: {"model": ErrorResponse, "description": "decoders overloaded (see Retry-After)"},
    503: {"model": ErrorResponse, "description": "no decoder available (see Retry-After)"},
}
