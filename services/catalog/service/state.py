"""Per-app state (``app.state.catalog``): settings, Redis client, stores, metrics, limits."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Annotated

import anyio
import redis
from fastapi import Depends, Request
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from widebeam.services.catalog.service.metrics import Metrics
from widebeam.services.catalog.service.settings import CatalogSettings
from widebeam.services.catalog.sid_layout import SidLayout
from widebeam.services.catalog.store import CatalogStore

# Large publishes pipeline up to 64 MiB per round trip: give a slow Redis time to answer.
_SOCKET_TIMEOUT_S = 60.0


@dataclass
class ServiceState:
    settings: CatalogSettings
    client: redis.Redis
    store: CatalogStore
    metrics: Metrics
    build_slots: anyio.Semaphore
    _layout_lock: threading.Lock = field(default_factory=threading.Lock)
    _layout: SidLayout | None = None
    _layout_loaded: bool = False

    @classmethod
    def create(cls, settings: CatalogSettings) -> ServiceState:
        client = redis.Redis.from_url(
            settings.redis_url,
            socket_connect_timeout=2.0,
            socket_timeout=_SOCKET_TIMEOUT_S,
            retry=Retry(ExponentialBackoff(cap=1.0, base=0.05), 2),
            health_check_interval=30,
            client_name="widebeam-catalog-service",
        )
        store = CatalogStore(client, settings.namespace, retain=settings.retain)
        metrics = Metrics(lambda: current_versions(store))
        slots = anyio.Semaphore(settings.max_concurrent_builds)
        return cls(settings, client, store, metrics, slots)

    def default_layout(self) -> SidLayout | None:
        """The settings' fallback layout, read once (a tokenizer.json can be large)."""
        with self._layout_lock:
            if not self._layout_loaded:
                self._layout = self.settings.default_layout()
                self._layout_loaded = True
            return self._layout


def current_versions(store: CatalogStore) -> dict[str, int | None]:
    """name -> current version of every catalog (one pipeline round trip)."""
    names = store.list_catalogs()
    pipe = store.client.pipeline(transaction=False)
    for name in names:
        pipe.get(store.keys.catalog(name).current)
    return {
        n: None if raw is None else int(raw) for n, raw in zip(names, pipe.execute(), strict=True)
    }


def get_state(request: Request) -> ServiceState:
    return request.app.state.catalog


State = Annotated[ServiceState, Depends(get_state)]  # route parameter type
