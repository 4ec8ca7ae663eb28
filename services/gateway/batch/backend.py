"""What the batch routes do in Redis: the job store and the Celery app, built on first use (so
creating the gateway never needs Redis up); submitting a job and queueing its failed rows again.
Blocking calls: the routes run them in the threadpool."""

from __future__ import annotations

import logging
from functools import cached_property
from typing import Any

from celery import Celery

from widebeam.services.gateway.batch.celery_app import create_celery, send_chunk
from widebeam.services.gateway.batch.job_ids import log_id
from widebeam.services.gateway.batch.job_store import JobRecord, JobStore
from widebeam.services.gateway.batch.settings import BatchSettings

log = logging.getLogger(__name__)


class BatchBackend:
    def __init__(self, settings: BatchSettings) -> None:
        self.settings = settings

    @cached_property
    def store(self) -> JobStore:
        s = self.settings
        return JobStore.from_url(s.redis_url, s.namespace, s.result_ttl_s, s.api_redis_retry_s)

    @cached_property
    def celery(self) -> Celery:
        return create_celery(self.settings)

    def submit(self, rows: list[dict[str, Any]], catalog: str | None, owner: str) -> JobRecord:
        s = self.settings
        job = self.store.create(
            rows, s.chunk_size, catalog, owner=owner, deadline_s=s.job_deadline_s
        )
        try:
            for chunk in range(job.num_chunks):
                send_chunk(self.celery, s, job.id, chunk)
        except Exception:
            self.store.fail(job.id)  # chunks already sent see a failed job and skip
            raise
        return job

    def retry_failed(self, job_id: str) -> tuple[str, int] | None:
        """(the job's status after the call, rows queued again); None: the job is gone."""
        outcome = self.store.retry_failed(job_id, self.settings.job_deadline_s)
        if outcome is None:
            return None
        status, rows, chunks = outcome
        for chunk in chunks:
            try:
                send_chunk(self.celery, self.settings, job_id, chunk)
            except Exception as exc:  # queued in the job store: a worker's watchdog sends it
                log.warning("job %s chunk %d: not sent (%s)", log_id(job_id), chunk,
                            type(exc).__name__)  # fmt: skip
        return status, rows
