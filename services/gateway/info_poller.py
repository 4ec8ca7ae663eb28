"""Poll every replica's GetInfo in the background: load and catalog gauges, and the cached
info (model name, limits, catalogs) the routes read without a round trip of their own."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from widebeam.services.gateway.decoder_pool import DecoderPool
from widebeam.services.gateway.metrics import GatewayMetrics

log = logging.getLogger(__name__)


class InfoPoller:
    def __init__(self, pool: DecoderPool, metrics: GatewayMetrics, interval_s: float) -> None:
        self.pool = pool
        self.metrics = metrics
        self.interval_s = interval_s
        self._task: asyncio.Task[None] | None = None

    async def poll_once(self) -> None:
        timeout = max(0.5, min(self.interval_s, 5.0))
        replicas = list(self.pool.replicas)
        answers = await asyncio.gather(*(self.pool.info_of(r, timeout) for r in replicas))
        for replica, info in zip(replicas, answers, strict=True):
            self.metrics.observe_info(replica.address, info)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="decoder-info-poller")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            try:
                await self.poll_once()
            except Exception:  # a poll must never end the loop; the next one may succeed
                log.exception("decoder GetInfo poll failed")
            await asyncio.sleep(self.interval_s)
