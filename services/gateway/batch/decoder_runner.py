"""The gateway's async `DecoderPool`, driven from synchronous Celery tasks.

One event loop per worker process runs on a daemon thread; the pool's channels live on that
loop, so rows of any task (solo or threads pool) share connections and can be in flight
together. Built lazily per process id, so a prefork child never inherits a parent's channels."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2 as pb
from widebeam.services.decoder.security.client import ChannelSecurity
from widebeam.services.gateway.batch.rows import recommend_row
from widebeam.services.gateway.batch.settings import BatchSettings
from widebeam.services.gateway.decoder_pool import DecoderPool
from widebeam.services.gateway.recommender import Recommender

T = TypeVar("T")

# Catalog versions (and their SID counts) change while a worker runs.
INFO_MAX_AGE_S = 5.0


class DecoderRunner:
    def __init__(self, settings: BatchSettings) -> None:
        self.settings = settings
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="batch-decoder-loop", daemon=True
        )
        self._thread.start()
        self.pool = DecoderPool(
            settings.decoder_addresses,
            deadline_s=settings.rpc_timeout_s,
            retry_attempts=max(2, len(settings.decoder_addresses)),
            retry_budget_s=min(settings.row_budget_s, 10.0),
            security=ChannelSecurity.from_env(),  # the decoder's token and TLS, if any
        )
        self.call(self.pool.start(), timeout=30)
        self._info_lock: asyncio.Lock | None = None
        self._info: pb.GetInfoResponse | None = None
        self._info_at = 0.0
        self.recommender = Recommender(self.pool, self.info, settings.max_beam_width)

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def call(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        return self.submit(coro).result(timeout)

    async def info(self, fresh: bool = False) -> pb.GetInfoResponse:
        """GetInfo (model, limits, catalogs), cached for INFO_MAX_AGE_S; on the loop."""
        if self._info_lock is None:
            self._info_lock = asyncio.Lock()
        async with self._info_lock:
            stale = time.monotonic() - self._info_at > INFO_MAX_AGE_S
            if self._info is None or fresh or stale:
                self._info = await self.pool.info(timeout=self.settings.rpc_timeout_s)
                self._info_at = time.monotonic()
            return self._info

    def recommend(self, row: dict[str, Any]) -> Future[dict[str, Any]]:
        """The row's result object, or an `ApiError`, as a future (decoded on the loop)."""
        return self.submit(
            recommend_row(self.recommender, row, budget_s=self.settings.row_budget_s)
        )


_runners: dict[tuple[int, str], DecoderRunner] = {}
_runners_lock = threading.Lock()


def runner_for(settings: BatchSettings) -> DecoderRunner:
    key = (os.getpid(), ",".join(settings.decoder_addresses))
    with _runners_lock:
        if key not in _runners:
            _runners[key] = DecoderRunner(settings)
        return _runners[key]
