"""gRPC status of a failed decoder call -> the HTTP error the client sees.

Nothing here maps to 500: client mistakes the decoder caught are 4xx, load and outages are 429 /
503 with Retry-After (the client should come back), and decoder faults are 502 (not ours). A
decoder that sheds a call by predicted wait says when to come back (trailing metadata
`retry-after`, seconds from its queue): that, not the gateway's fixed `retry_after_s`, becomes
the 429's Retry-After."""

from __future__ import annotations

import grpc

from widebeam.services.http.errors import ApiError, retry_later

RETRY_AFTER_KEY = "retry-after"  # the decoder's trailing metadata on a shed call

# Worth another replica: the call never ran (UNAVAILABLE) or was refused at once for load.
RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED})


def to_api_error(code: grpc.StatusCode, details: str, retry_after_s: int) -> ApiError:
    details = details or code.name
    if code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.OUT_OF_RANGE):
        return ApiError(400, details, "invalid_request")
    if code == grpc.StatusCode.FAILED_PRECONDITION:
        return ApiError(400, details, "failed_precondition")
    if code == grpc.StatusCode.NOT_FOUND:
        return ApiError(404, details, "not_found")
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return retry_later(429, f"decoders are overloaded: {details}", "overloaded", retry_after_s)
    if code == grpc.StatusCode.UNAVAILABLE:
        return retry_later(
            503,
            "no decoder replica is available; retry later",
            "decoder_unavailable",
            retry_after_s,
        )
    if code in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED):
        return retry_later(
            503,
            "the request did not finish within its deadline; retry later",
            "deadline_exceeded",
            retry_after_s,
        )
    return ApiError(502, f"the decoder failed: {code.name}: {details}", "decoder_error")


def decoder_retry_after(exc: grpc.aio.AioRpcError) -> int | None:
    """The decoder's Retry-After for a shed call (None: it gave none, or not a whole number)."""
    for key, value in exc.trailing_metadata() or ():
        if key == RETRY_AFTER_KEY:
            text = value.decode() if isinstance(value, bytes) else str(value)
            return int(text) if text.isdigit() and int(text) > 0 else None
    return None
