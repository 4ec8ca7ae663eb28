"""`POST /v1/recommend`: the gateway's limits, then the shared `Recommender`."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from widebeam.services.gateway.recommender import ROUTE, RecommendLimits, check_limits
from widebeam.services.gateway.schemas.common import ERROR_RESPONSES
from widebeam.services.gateway.schemas.recommend import RecommendRequest, RecommendResponse
from widebeam.services.gateway.state import State
from widebeam.services.http.errors import retry_later
from widebeam.services.http.plain_json import plain_json
from widebeam.services.http.strict_json_route import StrictJsonRoute


def create_router() -> APIRouter:
    router = APIRouter(tags=["recommend"], route_class=StrictJsonRoute)

    @router.post(
        ROUTE,
        response_model=RecommendResponse,
        responses=ERROR_RESPONSES,
        summary="Next items for a user's history (SID-constrained beam search)",
    )
    async def recommend(body: RecommendRequest, state: State) -> Response:
        settings = state.settings
        cap, who = await state.recommender.beam_cap()
        beam = check_limits(body, RecommendLimits.from_settings(settings), cap, who)
        late = retry_later(
            503, "no answer within the request deadline", "deadline_exceeded",
            settings.retry_after_s,
        )  # fmt: skip
        timeout_s = settings.request_timeout_s
        if body.timeout_ms is not None:  # the caller's own deadline, within the gateway's
            timeout_s = min(timeout_s, body.timeout_ms / 1000)
        # The answer is built of plain values by the recommender: sent as it is, without a
        # model object per item (response_model documents it).
        answer = await state.recommender.recommend(body, beam, timeout_s=timeout_s, late=late)
        return plain_json(answer)

    return router
