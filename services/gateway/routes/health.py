"""`/healthz` (the process answers), `/health` (SGLang's meaning: the server can serve — a
decoder answers GetInfo), `/readyz` (a decoder answers GetInfo and serves at least one catalog),
`/metrics` (Prometheus text). None of them needs an API key."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from widebeam.services.gateway.state import GatewayState, State
from widebeam.services.http.errors import ApiError

READY_TIMEOUT_S = 2.0


def create_router() -> APIRouter:
    router = APIRouter(tags=["operations"])

    @router.get("/healthz", summary="Liveness: the gateway process answers")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @router.get(
        "/health",
        summary="Health as SGLang answers it: 200 when a decoder answers, else 503",
        responses={503: {"description": "no decoder answers (see Retry-After)"}},
    )
    async def health(state: State) -> Response:
        try:
            await state.pool.info(timeout=READY_TIMEOUT_S)
        except ApiError as exc:
            return _unavailable(f"no decoder answers GetInfo: {exc.message}", state)
        return JSONResponse({"status": "ok"})

    @router.get(
        "/readyz",
        summary="Readiness: a decoder answers and serves a catalog",
        responses={503: {"description": "not ready (see Retry-After)"}},
    )
    async def readyz(state: State) -> Response:
        try:
            info = await state.pool.info(timeout=READY_TIMEOUT_S)
        except ApiError as exc:
            return _not_ready(f"no decoder answers GetInfo: {exc.message}", state)
        if not info.catalogs:
            return _not_ready("the decoders have no catalog loaded yet", state)
        body: dict[str, Any] = {
            "status": "ready",
            "model": state.model_name(),
            "catalogs": {c.name: c.version for c in info.catalogs},
            "decoders": {r.address: r.up for r in state.pool.replicas},
        }
        return JSONResponse(body)

    @router.get(
        "/metrics",
        summary="Prometheus metrics",
        response_class=Response,
        responses={200: {"content": {CONTENT_TYPE_LATEST: {}}, "description": "Prometheus text"}},
    )
    async def metrics(state: State) -> Response:
        return Response(state.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    return router


def _not_ready(reason: str, state: GatewayState) -> JSONResponse:
    return _unavailable(reason, state, status="not_ready")


def _unavailable(reason: str, state: GatewayState, status: str = "unavailable") -> JSONResponse:
    body = {
        "status": status,
        "reason": reason,
        "decoders": {r.address: r.up for r in state.pool.replicas},
    }
    headers = {"Retry-After": str(state.settings.retry_after_s)}
    return JSONResponse(body, status_code=503, headers=headers)
