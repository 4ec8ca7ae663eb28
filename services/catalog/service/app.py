"""``create_app(settings)``: the catalog service's FastAPI app (no module-level state).

Routes: ``upload.py`` (POST versions), ``catalogs.py`` (reads, activate), ``ops.py``
(healthz, readyz, metrics), each built by its ``create_router``; the write routes behind the
API-key dependency. Errors: the shared body and handlers of ``widebeam.services.http``, this
service's exceptions translated by ``errors.py``. API reference: docs/catalog.md and /docs.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import redis
from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool
from starlette.types import Scope

from widebeam.services.catalog.service import catalogs, ops, upload
from widebeam.services.catalog.service.errors import TRANSLATED, to_api_error
from widebeam.services.catalog.service.settings import CatalogSettings, redact_url
from widebeam.services.catalog.service.state import ServiceState
from widebeam.services.catalog.store import EvictingRedisError, require_no_eviction
from widebeam.services.http.api_keys import ApiKeyCheck
from widebeam.services.http.handlers import install_error_handlers
from widebeam.services.http.key_before_body import KeyBeforeBodyMiddleware

log = logging.getLogger("widebeam.catalog.service")

API_KEY_REALM = "widebeam-catalog"


def create_app(settings: CatalogSettings | None = None) -> FastAPI:
    """Build the app; ``settings`` default to the ``WIDEBEAM_CATALOG_*`` environment.

    The default SID layout (``model_dir``) is resolved here, so a bad setting fails at start-up.
    """
    settings = settings if settings is not None else CatalogSettings()
    state = ServiceState.create(settings)
    try:
        state.default_layout()
    except (OSError, ValueError) as exc:
        state.client.close()
        raise ValueError(f"catalog service: cannot read the default SID layout: {exc}") from None

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        log.info(
            "catalog service: redis %s, namespace %r, writes %s, upload limit %d bytes",
            redact_url(settings.redis_url),
            settings.namespace,
            "need an API key" if settings.api_key is not None else "are open (no API key)",
            settings.max_upload_bytes,
        )
        await run_in_threadpool(_refuse_evicting_redis, state)
        try:
            yield
        finally:
            await run_in_threadpool(state.client.close)

    app = FastAPI(
        title="widebeam catalog service",
        version="1",
        summary="Upload SID catalogs, publish versioned tries over Redis, look up items/SIDs.",
        lifespan=lifespan,
    )
    app.state.catalog = state
    install_error_handlers(app, "catalog service", to_api_error, TRANSLATED)
    api_keys = _api_keys(settings)
    require_write_key = api_keys.dependency()
    app.include_router(upload.create_router(require_write_key))
    app.include_router(catalogs.create_router(require_write_key))
    app.include_router(ops.create_router())
    # An upload without the key is a 401 from its headers, before a byte of its body is read.
    app.add_middleware(KeyBeforeBodyMiddleware, api_keys=api_keys, needs_key=_is_write)
    return app


def _refuse_evicting_redis(state: ServiceState) -> None:
    """Start-up fails on a Redis that may evict catalog keys (`store/eviction.py`); a Redis that
    does not answer yet is checked again by every publish."""
    try:
        require_no_eviction(state.client)
    except EvictingRedisError as exc:
        state.client.close()
        raise RuntimeError(f"catalog service: refusing to start: {exc}") from None
    except (redis.ConnectionError, redis.TimeoutError):
        log.warning(
            "catalog service: Redis does not answer yet; its eviction policy is checked "
            "at the first publish"
        )


def _api_keys(settings: CatalogSettings) -> ApiKeyCheck:
    """The write key; reads are open (catalogs hold no secrets)."""
    keys = [] if settings.api_key is None else [settings.api_key.get_secret_value().encode()]
    return ApiKeyCheck(keys, API_KEY_REALM, "unauthorized")


def _is_write(scope: Scope) -> bool:
    """Whether a request's route needs the write key (the POST routes)."""
    return scope["method"] == "POST"
