"""Bodies shared by several routes."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, Strict

from widebeam.services.http.error_schema import error_responses


def _encodable(value: str) -> str:
    # JSON may carry lone surrogates ("\\ud800"); they cannot reach protobuf or the tokenizer.
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("string is not valid Unicode (lone surrogate escape)") from None
    return value


Text = Annotated[str, AfterValidator(_encodable)]

# Numbers and flags as JSON writes them, nothing coerced: pydantic's lax mode would read
# `"n": true` as 1 and `"n": "3"` as 3, so a client's mistake would be served, not refused.
# A float field still takes a JSON integer (`"temperature": 1`), as JSON has one number type.
Int = Annotated[int, Strict()]
Float = Annotated[float, Strict()]
Bool = Annotated[bool, Strict()]


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


# Documented on every /v1 route (the OpenAPI page at /docs shows them).
ERROR_RESPONSES = error_responses(
    {
        400: "invalid request (the message names the field)",
        401: "missing or invalid API key",
        404: "unknown catalog or model",
        413: "request body too large",
        429: "decoders overloaded (see Retry-After)",
        503: "no decoder available (see Retry-After)",
    }
)
