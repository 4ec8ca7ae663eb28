"""The gateway's FastAPI app: `create_app(settings)`; nothing is created at import time.

Lifespan: open the decoder pool, poll the decoders' GetInfo (metrics, cached limits/catalogs),
close both at shutdown. Layers, outermost first: metrics, the API key of a `/v1` request with a
body (401 before the body is read), body limit, load shedding, exception handlers, routes (the
`/v1` ones, batch jobs included, behind the API-key dependency; health, the API docs and the
playground page open)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import APIRouter, Depends, FastAPI
from starlette.types import Scope

from widebeam.services.gateway.batch.router import batch_settings_for, create_batch_router
from widebeam.services.gateway.batch.schemas import RowLimits
from widebeam.services.gateway.decoder_pool import DecoderPool
from widebeam.services.gateway.disconnect import CancelOnDisconnectMiddleware
from widebeam.services.gateway.info_poller import InfoPoller
from widebeam.services.gateway.metrics import GatewayMetrics
from widebeam.services.gateway.middleware import BodyLimitMiddleware, MetricsMiddleware
from widebeam.services.gateway.routes import (
    api_docs,
    chat,
    completions,
    generate,
    health,
    items,
    models,
    playground,
    recommend,
)
from widebeam.services.gateway.server_timing import ServerTimingMiddleware
from widebeam.services.gateway.settings import GatewaySettings
from widebeam.services.gateway.shedding import LoadShedMiddleware
from widebeam.services.gateway.state import GatewayState
from widebeam.services.http.api_keys import ApiKeyCheck
from widebeam.services.http.handlers import install_error_handlers
from widebeam.services.http.key_before_body import KeyBeforeBodyMiddleware
from widebeam.services.long_lived import freeze_start_up_objects

API_KEY_REALM = "widebeam"


def create_app(settings: GatewaySettings | None = None) -> FastAPI:
    settings = settings or GatewaySettings()
    metrics = GatewayMetrics()
    pool = DecoderPool.from_settings(settings, observer=metrics.observe_call)
    state = GatewayState(settings, pool, metrics)
    poller = InfoPoller(pool, metrics, settings.info_poll_interval_s)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await pool.start()  # grpc.aio channels belong to the loop that serves the app
        metrics.track_in_flight(pool.replicas)
        await poller.poll_once()  # limits and catalogs known before the first request
        poller.start()
        freeze_start_up_objects()  # the app, its routes' models, imported code
        try:
            yield
        finally:
            await poller.stop()
            await pool.close()

    app = FastAPI(
        title="widebeam gateway",
        summary="Generative recommendation: SID-constrained wide beam search over HTTP.",
        version="1",
        lifespan=lifespan,
        docs_url=None,  # /docs and /redoc come from api_docs, with assets served here
        redoc_url=None,
    )
    app.state.gateway = state
    install_error_handlers(app, "gateway")
    api_keys = ApiKeyCheck(settings.key_values(), API_KEY_REALM, "invalid_api_key")
    require_api_key = api_keys.dependency()
    v1 = APIRouter(dependencies=[Depends(require_api_key)])
    for module in (recommend, completions, chat, models, generate):
        v1.include_router(module.create_router())
    batch = batch_settings_for(settings)
    row_limits = RowLimits.from_settings(settings)
    v1.include_router(create_batch_router(batch, row_limits, api_keys))  # jobs owned by keys
    v1.include_router(items.create_router(settings.items_file))
    app.include_router(v1)
    app.include_router(health.create_router())
    app.include_router(api_docs.create_router(app.title, app.openapi_url or "/openapi.json"))
    app.include_router(playground.create_router())
    app.add_middleware(CancelOnDisconnectMiddleware)  # innermost: around the handler alone
    # After the body is read: keep-alive. A bad API key is a 401 there too, never a 429.
    app.add_middleware(LoadShedMiddleware, pool=pool, api_keys=api_keys)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    # Before the body limit reads a body: no body is read for a request without a valid key.
    app.add_middleware(KeyBeforeBodyMiddleware, api_keys=api_keys, needs_key=_under_v1)
    if settings.server_timing:  # from the request's arrival in the app: body reading included
        app.add_middleware(ServerTimingMiddleware)
    app.add_middleware(MetricsMiddleware, metrics=metrics)  # added last = outermost
    return app


def _under_v1(scope: Scope) -> bool:
    """Whether a request's route is behind the API key (every `/v1` route, and SGLang's
    `/generate`)."""
    path = str(scope["path"])
    return path.startswith("/v1/") or path == generate.ROUTE
