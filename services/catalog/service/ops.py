"""Operational routes: liveness, readiness (Redis reachable) and Prometheus metrics."""

from __future__ import annotations

import redis
from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from widebeam.services.catalog.service.errors import redis_unavailable
from widebeam.services.catalog.service.models import Status
from widebeam.services.catalog.service.state import State
from widebeam.services.http.error_schema import error_responses


def create_router() -> APIRouter:
    router = APIRouter(tags=["operations"])

    @router.get("/healthz", response_model=Status, summary="The process is up")
    def healthz() -> Status:
        return Status(status="ok")

    @router.get(
        "/readyz",
        response_model=Status,
        responses=error_responses({503: "Redis unreachable"}),
        summary="Redis is reachable",
    )
    def readyz(state: State) -> Status | JSONResponse:
        try:
            state.client.ping()
        except redis.RedisError as exc:
            return redis_unavailable(f"Redis is unreachable ({type(exc).__name__})").response()
        return Status(status="ready")

    @router.get(
        "/metrics",
        response_class=Response,
        responses={200: {"content": {CONTENT_TYPE_LATEST: {}}, "description": "Prometheus text"}},
        summary="Prometheus metrics",
    )
    def metrics(state: State) -> Response:
        return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return router
