"""The chunk task: decode a chunk's rows, write each result once, finish the job when complete.

Redelivery is expected (a worker killed mid-chunk leaves the chunk unacked; Redis hands it out
again after the visibility timeout), so the task skips rows whose result is present and writes
with HSETNX: a chunk run twice, even concurrently, yields each row exactly once.

Redis unreachable: each job-store command retries for `redis_retry_s` (a restart passes
unnoticed); past that the chunk is handed back to the queue, never failed. A failed task is
acknowledged (acks_late acks failures too), so failing it on a Redis error would drop the chunk
and leave its job running forever."""

from __future__ import annotations

import logging
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import Any

import redis
from celery import Celery, Task
from celery.exceptions import Reject

from widebeam.services.gateway.batch.celery_app import RUN_CHUNK
from widebeam.services.gateway.batch.decoder_runner import DecoderRunner, runner_for
from widebeam.services.gateway.batch.job_store import ACTIVE, JobStore
from widebeam.services.gateway.batch.rows import error_result
from widebeam.services.gateway.batch.settings import BatchSettings
from widebeam.services.http.errors import ApiError

log = logging.getLogger(__name__)

# Decoder refusals that say "later", not "never": the chunk is retried while attempts last.
TRANSIENT_STATUSES = frozenset({429, 503})
# Redis out of reach (after the job store's own retries): the chunk goes back to the queue.
REDIS_DOWN = (redis.ConnectionError, redis.TimeoutError)


class DecodersUnavailable(Exception):
    """No decoder could take a row now; the chunk should run again later."""


def process_chunk(
    store: JobStore,
    runner: DecoderRunner,
    job_id: str,
    chunk_index: int,
    *,
    rows_in_flight: int,
    final_attempt: bool,
) -> dict[str, Any]:
    summary: dict[str, Any] = {"job": job_id, "chunk": chunk_index, "written": 0}
    chunk = store.chunk_rows(job_id, chunk_index)
    if chunk is None:
        return summary | {"outcome": "gone"}
    start, rows = chunk
    status = store.mark_running(job_id)
    if status not in ACTIVE:
        return summary | {"outcome": status or "gone"}
    indexes = range(start, start + len(rows))
    present = store.present(job_id, indexes)
    todo = deque((i, rows[i - start]) for i in indexes if i not in present)
    inflight: dict[Future[dict[str, Any]], tuple[int, dict[str, Any]]] = {}
    transient: ApiError | None = None
    outcome = "ran"
    while todo or inflight:
        # Cancellation is checked before each row is sent, so a cancelled job stops within
        # rows_in_flight rows.
        while todo and transient is None and len(inflight) < rows_in_flight:
            if store.status(job_id) not in ACTIVE:
                todo.clear()
                outcome = "cancelled"
                break
            index, row = todo.popleft()
            inflight[runner.recommend(row)] = (index, row)
        if not inflight:
            break
        finished, _ = wait(inflight, return_when=FIRST_COMPLETED)
        for future in finished:
            index, row = inflight.pop(future)
            try:
                result, is_error = future.result(), False
            except ApiError as exc:
                if exc.status in TRANSIENT_STATUSES and not final_attempt:
                    transient = transient or exc
                    continue
                result, is_error = error_result(exc, row), True
            except Exception as exc:  # a bug must cost one row, not the whole job
                log.exception("row %d of job %s failed", index, job_id)
                error = ApiError(502, f"the row failed: {type(exc).__name__}", "internal_error")
                result, is_error = error_result(error, row), True
            if store.write_row(job_id, index, result, is_error) == 1:
                summary["written"] += 1
    if transient is not None:
        raise DecodersUnavailable(transient.message)
    if outcome == "ran":
        outcome = store.finish_if_complete(job_id) or "gone"
    return summary | {"outcome": outcome}


def register_tasks(app: Celery, settings: BatchSettings) -> None:
    store = JobStore.from_url(
        settings.redis_url, settings.namespace, settings.result_ttl_s, settings.redis_retry_s
    )

    @app.task(
        name=RUN_CHUNK,
        bind=True,
        acks_late=True,
        reject_on_worker_lost=True,
        max_retries=settings.chunk_max_retries,
        # Progress and results live in the job store; a Celery result per chunk would only be
        # one more Redis write that can fail after the chunk's work is done.
        ignore_result=True,
    )
    def run_chunk(self: Task, job_id: str, chunk_index: int) -> dict[str, Any]:
        retries = int(self.request.retries or 0)
        try:
            return process_chunk(
                store,
                runner_for(settings),
                job_id,
                chunk_index,
                rows_in_flight=settings.rows_in_flight,
                final_attempt=retries >= settings.chunk_max_retries,
            )
        except DecodersUnavailable as exc:
            log.warning("job %s chunk %d: %s; retrying later", job_id, chunk_index, exc)
            raise self.retry(countdown=settings.retry_delay_s) from exc
        except REDIS_DOWN as exc:
            # Requeued now if Redis is back; if not, the reject fails too and the chunk stays
            # unacked, so Redis hands it out again after the visibility timeout.
            log.warning("job %s chunk %d: Redis down (%s); requeued", job_id, chunk_index, exc)
            raise Reject(exc, requeue=True) from exc
