"""`POST /v1/recommend`."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from widebeam.services.gateway import recommender
from widebeam.services.gateway.schemas.common import ERROR_RESPONSES
from widebeam.services.gateway.schemas.recommend import RecommendRequest, RecommendResponse
from widebeam.services.gateway.state import State


def create_router() -> APIRouter:
    router = APIRouter(tags=["recommend"])

    @router.post(
        "/v1/recommend",
        response_model=RecommendResponse,
        responses=ERROR_RESPONSES,
        summary="Next items for a user's history (SID-constrained beam search)",
    )
    async def recommend(body: RecommendRequest, state: State) -> dict[str, Any]:
        return await recommender.recommend(state, body)

    return router
