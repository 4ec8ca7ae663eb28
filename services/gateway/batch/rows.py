"""One batch row through the gateway's `Recommender` -> its `/v1/recommend` body (plus
`user_id` when the row has one), or the error line the gateway would have answered.

Rows were validated and their beam width resolved at submission; here the stored row is parsed
again by `RecommendRequest` (a row stored before a field existed gets its default) and decoded
with the row's time budget. A row that gave no beam_width had the gateway's default beam, which
is narrowed to the decoders' widest beam here, as `/v1/recommend` narrows it."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from widebeam.services.gateway.batch.schemas import DEFAULTED_BEAM, validation_problems
from widebeam.services.gateway.recommender import Recommender
from widebeam.services.gateway.schemas.recommend import RecommendRequest
from widebeam.services.http.errors import ApiError, bad_request


async def recommend_row(
    recommender: Recommender, row: dict[str, Any], *, budget_s: float
) -> dict[str, Any]:
    """The row's result; raises `ApiError` when the decoders refuse it or time runs out."""
    stored = dict(row)
    defaulted = bool(stored.pop(DEFAULTED_BEAM, False))
    try:
        body = RecommendRequest.model_validate(stored)
    except ValidationError as exc:
        message = f"the stored row is not a valid request: {validation_problems(exc)}"
        raise ApiError(400, message, "invalid_request") from None
    beam = int(stored["beam_width"])
    if defaulted:  # the live route's default: never wider than the decoders' widest beam
        beam = min(beam, (await recommender.beam_cap())[0])
        if body.n > beam:
            raise bad_request(f"n ({body.n}) must be <= beam_width ({beam})", param="n")
    late = ApiError(503, "the row did not finish within its time budget", "deadline_exceeded")
    result = await recommender.recommend(body, beam, timeout_s=budget_s, late=late)
    return ({} if body.user_id is None else {"user_id": body.user_id}) | result


def error_result(error: ApiError, row: dict[str, Any] | None = None) -> dict[str, Any]:
    """`{"error": {...}}` as the gateway would answer it, with the HTTP status it would use."""
    body = error.body()["error"] | {"status": error.status}
    prefix = {} if not row or row.get("user_id") is None else {"user_id": row["user_id"]}
    return prefix | {"error": body}
