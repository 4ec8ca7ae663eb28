"""`/healthz` (the process answers), `/health` (SGLang's meaning: the server can serve — a
decoder answers GetInfo), `/readyz` (a decoder answers GetInfo and serves at least one catalog),
`/metrics` (Prometheus text). None of them needs an API key."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2 as pb
from widebeam.services.gateway.state import GatewayState, State
from widebeam.services.http.errors import ApiError

READY_TIMEOUT_S = 2.0


def create_router() -> APIRouter:
    router = APIRouter(tags=["operations"])

    @router.get("/healthz", summary="Liveness: the gateway process answers")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    def decoder_probe(
        path: str,
        summary: str,
        status: str,
        documented_503: str,
        respond: Callable[[pb.GetInfoResponse, GatewayState], Response],
    ) -> None:
        """A probe that needs a decoder's GetInfo: `respond` to it, or 503 with `status` when
        none answers."""

        @router.get(
            path,
            name=path.strip("/"),  # the OpenAPI operation id's stem: health, readyz
            summary=summary,
            responses={503: {"description": f"{documented_503} (see Retry-After)"}},
        )
        async def probe(state: State) -> Response:
            try:
                info = await state.pool.info(timeout=READY_TIMEOUT_S)
            except ApiError as exc:
                return _unavailable(f"no decoder answers GetInfo: {exc.message}", state, status)
            return respond(info, state)

    decoder_probe(
        "/health",
        "Health as SGLang answers it: 200 when a decoder answers, else 503",
        "unavailable",
        "no decoder answers",
        lambda info, state: JSONResponse({"status": "ok"}),
    )
    decoder_probe(
        "/readyz",
        "Readiness: a decoder answers and serves a catalog",
        "not_ready",
        "not ready",
        _ready,
    )

    @router.get(
        "/metrics",
        summary="Prometheus metrics",
        response_class=Response,
        responses={200: {"content": {CONTENT_TYPE_LATEST: {}}, "description": "Prometheus text"}},
    )
    async def metrics(state: State) -> Response:
        return Response(state.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    return router


def _ready(info: pb.GetInfoResponse, state: GatewayState) -> JSONResponse:
    """/readyz once a decoder answers: ready when it serves a catalog."""
    if not info.catalogs:
        return _unavailable("the decoders have no catalog loaded yet", state, "not_ready")
    body: dict[str, Any] = {
        "status": "ready",
        "model": state.model_name(),
        "catalogs": {c.name: c.version for c in info.catalogs},
        "decoders": {r.address: r.up for r in state.pool.replicas},
    }
    return JSONResponse(body)


def _unavailable(reason: str, state: GatewayState, status: str) -> JSONResponse:
    body = {
        "status": status,
        "reason": reason,
        "decoders": {r.address: r.up for r in state.pool.replicas},
    }
    headers = {"Retry-After": str(state.settings.retry_after_s)}
    return JSONResponse(body, status_code=503, headers=headers)
