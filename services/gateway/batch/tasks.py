"""The chunk task: decode a chunk's rows, write each result once, finish the job when complete.

Redelivery is expected (a worker killed mid-chunk, a chunk sent again by a watchdog, a broker
redelivery), so a run takes the chunk's lease first (`chunk_leases`: a second run of a chunk
that is alive elsewhere leaves at once), skips rows whose result is present and writes with
HSETNX: a chunk run twice, even concurrently, yields each row exactly once.

Decoders unavailable or overloaded (429/503 after the pool's own retries on other replicas):
the chunk keeps its lease and its rows wait; no row is sent for a back-off (retry_delay_s,
doubling up to retry_delay_max_s), then they are tried again, until the job's deadline
(`deadline_at`: job_deadline_s after its submission or its last retry-failed). Past it such an
answer is the row's result, and the job ends completed_with_errors.

Redis errors of any kind (transient ones after the job store's own retries): the chunk is
handed back to the queue, never failed. A failed task is acknowledged (acks_late acks
failures too), so failing it would drop the chunk and leave its job running forever."""

from __future__ import annotations

import contextlib
import logging
import time
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from functools import partial
from typing import Any

import redis
from celery import Celery, Task
from celery.exceptions import Reject

from widebeam.services.gateway.batch.celery_app import RUN_CHUNK, send_chunk
from widebeam.services.gateway.batch.chunk_leases import ChunkLeases
from widebeam.services.gateway.batch.decoder_runner import DecoderRunner, runner_for
from widebeam.services.gateway.batch.job_ids import log_id, redact
from widebeam.services.gateway.batch.job_store import ACTIVE, JobStore
from widebeam.services.gateway.batch.rows import error_result
from widebeam.services.gateway.batch.settings import BatchSettings
from widebeam.services.gateway.batch.watchdog import ChunkWatchdog, watchdog_step
from widebeam.services.http.errors import ApiError

log = logging.getLogger(__name__)

# Decoder refusals that say "later", not "never": the row waits while the job's deadline lasts.
TRANSIENT_STATUSES = frozenset({429, 503})
# How often a chunk waiting for decoders looks whether its job was cancelled.
CANCEL_CHECK_S = 1.0


@dataclass(frozen=True)
class ChunkPolicy:
    """How a chunk runs: rows at once, its lease, the back-off while decoders are away."""

    rows_in_flight: int
    lease_s: float
    first_delay_s: float
    max_delay_s: float
    deadline_s: float  # for a job stored without a deadline: wait this long from now

    @classmethod
    def from_settings(cls, settings: BatchSettings) -> ChunkPolicy:
        return cls(
            rows_in_flight=settings.rows_in_flight,
            lease_s=settings.lease_s,
            first_delay_s=settings.retry_delay_s,
            max_delay_s=max(settings.retry_delay_s, settings.retry_delay_max_s),
            deadline_s=settings.job_deadline_s,
        )


def process_chunk(
    store: JobStore,
    leases: ChunkLeases,
    runner: DecoderRunner,
    job_id: str,
    chunk_index: int,
    policy: ChunkPolicy,
) -> dict[str, Any]:
    """Runs one chunk; a summary for the log: sends to decoders (`sent`), those answered
    "later" and sent again (`refused`; so sent - refused rows were decoded), rows `written`,
    and the `outcome` (the job's status after it, or why the run did nothing)."""
    summary: dict[str, Any] = {"job": log_id(job_id), "chunk": chunk_index}
    summary |= {"sent": 0, "refused": 0, "written": 0}
    chunk = store.chunk_rows(job_id, chunk_index)
    if chunk is None:
        leases.release(job_id, chunk_index)
        return summary | {"outcome": "gone"}
    status = store.mark_running(job_id)
    if status not in ACTIVE:
        leases.release(job_id, chunk_index)
        return summary | {"outcome": status or "gone"}
    if not leases.take(job_id, chunk_index, policy.lease_s):
        return summary | {"outcome": "leased elsewhere"}
    with leases.kept(job_id, chunk_index, policy.lease_s):
        outcome = _decode_rows(store, runner, job_id, chunk_index, chunk, policy, summary)
    leases.release(job_id, chunk_index)
    if outcome == "ran":
        outcome = store.finish_if_complete(job_id) or "gone"
    return summary | {"outcome": outcome}


def _decode_rows(
    store: JobStore,
    runner: DecoderRunner,
    job_id: str,
    chunk_index: int,
    chunk: tuple[int, list[dict[str, Any]]],
    policy: ChunkPolicy,
    summary: dict[str, Any],
) -> str:
    """Every row not yet written gets its result: "ran", or "cancelled" when the job was
    cancelled first (rows in flight then are still written)."""
    start, rows = chunk
    deadline = store.deadline(job_id) or time.time() + policy.deadline_s
    indexes = range(start, start + len(rows))
    present = store.present(job_id, indexes)
    todo = deque((i, rows[i - start]) for i in indexes if i not in present)
    inflight: dict[Future[dict[str, Any]], tuple[int, dict[str, Any]]] = {}
    delay = policy.first_delay_s
    resume_at = 0.0  # monotonic; while decoders are away, no row is sent before it
    outcome = "ran"
    while todo or inflight:
        if not inflight and time.monotonic() < resume_at:
            if not _wait_for_decoders(store, job_id, resume_at):
                return "cancelled"
            continue
        # Cancellation is checked before each row is sent, so a cancelled job stops within
        # rows_in_flight rows.
        while todo and len(inflight) < policy.rows_in_flight and time.monotonic() >= resume_at:
            if store.status(job_id) not in ACTIVE:
                todo.clear()
                outcome = "cancelled"
                break
            index, row = todo.popleft()
            inflight[runner.recommend(row)] = (index, row)
            summary["sent"] += 1
        if not inflight:
            continue
        finished, _ = wait(inflight, return_when=FIRST_COMPLETED)
        for future in finished:
            index, row = inflight.pop(future)
            try:
                result, is_error = future.result(), False
            except ApiError as exc:
                if exc.status in TRANSIENT_STATUSES and time.time() < deadline:
                    todo.appendleft((index, row))
                    summary["refused"] += 1
                    if resume_at <= time.monotonic():  # one back-off per wave of refusals
                        log.warning(
                            "job %s chunk %d: decoders unavailable (%s); rows wait %.1f s",
                            log_id(job_id), chunk_index, exc.code, delay,
                        )  # fmt: skip
                        resume_at = time.monotonic() + delay
                        delay = min(delay * 2, policy.max_delay_s)
                    continue
                result, is_error = error_result(exc, row), True
            except Exception as exc:  # a bug must cost one row, not the whole job
                log.exception("row %d of job %s failed", index, log_id(job_id))
                error = ApiError(502, f"the row failed: {type(exc).__name__}", "internal_error")
                result, is_error = error_result(error, row), True
            delay = policy.first_delay_s  # a decoder answered
            if store.write_row(job_id, index, result, is_error) == 1:
                summary["written"] += 1
    return outcome


def _wait_for_decoders(store: JobStore, job_id: str, resume_at: float) -> bool:
    """Sleeps until `resume_at` (monotonic); False as soon as the job is no longer active."""
    while (left := resume_at - time.monotonic()) > 0:
        time.sleep(min(left, CANCEL_CHECK_S))
        if store.status(job_id) not in ACTIVE:
            return False
    return True


def register_tasks(app: Celery, settings: BatchSettings) -> None:
    """The chunk task, and the watchdog that every worker of `app` runs."""
    store = JobStore.from_url(
        settings.redis_url, settings.namespace, settings.result_ttl_s, settings.redis_retry_s
    )
    leases = ChunkLeases(store.client, settings.namespace)
    policy = ChunkPolicy.from_settings(settings)

    @app.task(
        name=RUN_CHUNK,
        bind=True,
        acks_late=True,
        reject_on_worker_lost=True,
        # Progress and results live in the job store; a Celery result per chunk would only be
        # one more Redis write that can fail after the chunk's work is done.
        ignore_result=True,
    )
    def run_chunk(self: Task, job_id: str, chunk_index: int) -> dict[str, Any]:
        try:
            return process_chunk(store, leases, runner_for(settings), job_id, chunk_index, policy)
        except redis.RedisError as exc:
            reason = redact(f"{type(exc).__name__}: {exc}", job_id)
            log.warning("job %s chunk %d: Redis error (%s); requeued", log_id(job_id),
                        chunk_index, reason)  # fmt: skip
            # Free for the next run at once; should this fail too, the lease runs out.
            with contextlib.suppress(redis.RedisError):
                leases.hand_back(job_id, chunk_index)
            time.sleep(settings.retry_delay_s)  # an error that lasts must not spin the queue
            # Requeued now if Redis takes it; if not, the message stays unacked for the broker's
            # redelivery, and the chunk's lease entry for the watchdogs. `from None`: the
            # Redis error's text may name the job's keys, and Celery logs the chain.
            raise Reject(reason, requeue=True) from None

    def make_watchdog() -> ChunkWatchdog:
        send = partial(send_chunk, app, settings)
        return ChunkWatchdog(
            leases, send, settings.queue, settings.watchdog_interval_s, settings.lost_chunk_grace_s
        )

    app.steps["worker"].add(watchdog_step(make_watchdog))
