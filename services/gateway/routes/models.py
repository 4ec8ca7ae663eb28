"""OpenAI-compatible `GET /v1/models` and `GET /v1/models/{model}`: one entry per name the
served model answers to (its own first, then the `served_model_names` aliases)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from widebeam.services.gateway.schemas.common import ERROR_RESPONSES
from widebeam.services.gateway.state import GatewayState, State


def _model(state: GatewayState, name: str) -> dict[str, Any]:
    info = state.pool.latest_info()
    entry: dict[str, Any] = {
        "id": name,
        "object": "model",
        "created": 0,
        "owned_by": "widebeam",
    }
    if info is not None:  # extensions: what a client needs to size its requests
        entry["max_beam_width"] = state.beam_cap()[0]
        entry["max_model_len"] = info.limits.max_model_len
        entry["catalogs"] = [
            {"name": c.name, "version": c.version, "num_items": c.num_items} for c in info.catalogs
        ]
    return entry


def create_router() -> APIRouter:
    router = APIRouter(tags=["openai"])

    @router.get("/v1/models", responses=ERROR_RESPONSES, summary="The served model (OpenAI)")
    async def list_models(state: State) -> dict[str, Any]:
        await state.refresh_info()
        return {"object": "list", "data": [_model(state, name) for name in state.model_names()]}

    @router.get("/v1/models/{model}", responses=ERROR_RESPONSES, summary="One model (OpenAI)")
    async def get_model(model: str, state: State) -> dict[str, Any]:
        await state.refresh_info()
        return _model(state, state.check_model(model))

    return router
