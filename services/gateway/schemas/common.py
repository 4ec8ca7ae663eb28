"""Bodies shared by several routes."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel

from widebeam.services.http.error_schema import error_responses


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
