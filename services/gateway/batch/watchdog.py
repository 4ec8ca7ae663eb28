"""The chunk watchdog: a thread in every batch worker that sends again the chunks nobody is
running, every `watchdog_interval_s` (see `chunk_leases` for when a chunk counts as lost).

A worker killed mid-chunk stops renewing its lease; within `lease_s` plus one interval another
worker's watchdog (or the restarted worker's own) sends the chunk again, and the new run skips
the rows already written. Without it the chunk waited out the broker's visibility timeout
(an hour by default). Started and stopped with the worker (`WatchdogStep`, a Celery bootstep)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import redis
from celery import bootsteps

from widebeam.services.gateway.batch.chunk_leases import ChunkLeases
from widebeam.services.gateway.batch.job_ids import log_id

log = logging.getLogger(__name__)

SendChunk = Callable[[str, int], None]


class ChunkWatchdog:
    def __init__(
        self,
        leases: ChunkLeases,
        send: SendChunk,
        broker_queue: str,
        interval_s: float,
        grace_s: float,
    ) -> None:
        self.leases = leases
        self.send = send
        self.broker_queue = broker_queue
        self.interval_s = interval_s
        self.grace_s = grace_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sweep(self) -> int:
        """Sends the lost chunks once; how many. A send that fails leaves its chunk queued, so
        a later sweep sends it again."""
        lost = self.leases.reclaim(self.broker_queue, self.grace_s)
        for job_id, chunk in lost:
            log.warning("job %s chunk %d: nobody is running it; sent again", log_id(job_id), chunk)
            self.send(job_id, chunk)
        return len(lost)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.sweep()
            except (redis.RedisError, OSError) as exc:  # Redis or the broker away: next sweep
                log.warning("chunk watchdog: sweep failed (%s)", type(exc).__name__)
            except Exception:  # a bug must not end the sweeps
                log.exception("chunk watchdog: sweep failed")

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="batch-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)


def watchdog_step(make: Callable[[], ChunkWatchdog]) -> type[bootsteps.StartStopStep]:
    """A worker bootstep running the watchdog that `make()` builds, for `app.steps['worker']`."""

    class WatchdogStep(bootsteps.StartStopStep):
        name = "widebeam batch watchdog"

        def create(self, worker: Any) -> ChunkWatchdog:
            return make()

    return WatchdogStep
