"""`/v1/batch-jobs`: submit recommend requests in bulk, follow progress, stream results, cancel.

Mounted by the gateway's `create_app` under its `/v1` router (API-key dependency included) via
`create_batch_router(batch_settings, row_limits)`. The routes only talk to Redis (job store +
Celery broker); `widebeam worker` does the decoding."""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cached_property
from typing import Any

import redis
from celery import Celery
from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from widebeam.services.gateway.batch.celery_app import RUN_CHUNK, create_celery
from widebeam.services.gateway.batch.job_store import ACTIVE, JobRecord, JobStore
from widebeam.services.gateway.batch.schemas import (
    BatchJobCreated,
    BatchJobRequest,
    BatchJobStatus,
    RowLimits,
)
from widebeam.services.gateway.batch.settings import BatchSettings
from widebeam.services.gateway.batch.uploads import BadSubmission, read_submission
from widebeam.services.gateway.settings import GatewaySettings
from widebeam.services.http.error_schema import error_responses
from widebeam.services.http.errors import ApiError, retry_later

_JOB_ID = re.compile(r"^[0-9a-f]{32}$")

_SUBMIT_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": BatchJobRequest.model_json_schema()},
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file"],
                    "properties": {
                        "file": {"type": "string", "format": "binary", "description": "JSONL"},
                        "catalog": {"type": "string"},
                    },
                }
            },
            "application/x-ndjson": {"schema": {"type": "string"}},
        },
    }
}


def _errors(extra: dict[int, str] | None = None) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses=` of a route: the errors every batch route can answer, plus `extra`
    (status -> description) for the route's own."""
    common = {
        400: "malformed parameter (the message names it)",
        401: "missing or invalid API key",
        404: "unknown or expired job",
        503: "the job store or broker is unavailable (see Retry-After)",
    }
    return error_responses(common | (extra or {}))


class _Backend:
    """Redis clients built on first use, so creating the app never needs Redis up."""

    def __init__(self, settings: BatchSettings) -> None:
        self.settings = settings

    @cached_property
    def store(self) -> JobStore:
        s = self.settings
        return JobStore.from_url(s.redis_url, s.namespace, s.result_ttl_s, s.api_redis_retry_s)

    @cached_property
    def celery(self) -> Celery:
        return create_celery(self.settings)

    def submit(self, rows: list[dict[str, Any]], catalog: str | None) -> JobRecord:
        job = self.store.create(rows, self.settings.chunk_size, catalog)
        try:
            for chunk in range(job.num_chunks):
                self.celery.send_task(RUN_CHUNK, args=[job.id, chunk], queue=self.settings.queue)
        except Exception:
            self.store.fail(job.id)  # chunks already sent see a failed job and skip
            raise
        return job


def batch_settings_for(gateway: GatewaySettings) -> BatchSettings:
    """`WIDEBEAM_BATCH_*` settings; the gateway's redis_url, when it has one, wins."""
    redis_url = gateway.redis_url
    return BatchSettings(redis_url=redis_url) if redis_url else BatchSettings()


def _status(job: JobRecord) -> BatchJobStatus:
    return BatchJobStatus(**{k: getattr(job, k) for k in BatchJobStatus.model_fields})


def _not_found(job_id: str) -> JSONResponse:
    message = f"no batch job {job_id!r} (unknown or expired)"
    return ApiError(404, message, "job_not_found").response()


def _store_down() -> JSONResponse:
    return retry_later(503, "the batch job store is unavailable", "batch_unavailable", 1).response()


def create_batch_router(batch: BatchSettings, limits: RowLimits) -> APIRouter:
    """The routes; rows are held to `limits` at submission (workers reach the decoders
    themselves). The includer adds the API-key dependency, as for every `/v1` router."""
    backend = _Backend(batch)
    router = APIRouter(prefix="/v1/batch-jobs", tags=["batch jobs"])

    async def load(job_id: str) -> JobRecord | JSONResponse:
        if not _JOB_ID.match(job_id):
            return _not_found(job_id)
        try:
            job = await run_in_threadpool(backend.store.get, job_id)
        except redis.RedisError:
            return _store_down()
        return job if job is not None else _not_found(job_id)

    @router.post(
        "",
        status_code=202,
        response_model=BatchJobCreated,
        openapi_extra=_SUBMIT_BODY,
        responses=_errors({400: "invalid row, body or parameter", 413: "too many rows or bytes"}),
    )
    async def submit(request: Request) -> Any:
        """JSON `{"requests": [...], "catalog"?}`, a multipart JSONL `file` (+ `catalog`), or
        an `application/x-ndjson` body; one `/v1/recommend` body per row or line."""
        try:
            rows, catalog = await read_submission(
                request, limits, batch.max_job_rows, batch.max_upload_bytes
            )
        except BadSubmission as exc:
            return ApiError(exc.status, exc.message, "invalid_batch", param=exc.param).response()
        try:
            job = await run_in_threadpool(backend.submit, rows, catalog)
        except Exception:  # Redis or the broker is down: nothing usable was enqueued
            return _store_down()
        return JSONResponse({"id": job.id, "status": job.status}, status_code=202)

    @router.get("/{job_id}", response_model=BatchJobStatus, responses=_errors())
    async def status(job_id: str) -> Any:
        job = await load(job_id)
        return job if isinstance(job, JSONResponse) else _status(job)

    @router.get(
        "/{job_id}/results",
        response_class=StreamingResponse,
        responses={
            200: {"content": {"application/x-ndjson": {}}, "description": "JSONL, input order"},
            **_errors({409: "the job is still queued or running (see ?partial=true)"}),
        },
    )
    async def results(
        job_id: str,
        partial: bool = Query(False, description="stream the rows done so far of a running job"),
    ) -> Response:
        """JSONL in input order, one line per row: the `/v1/recommend` response plus `row`, or
        `{"row", "error"}`. A job still queued or running answers 409 unless `partial=true`;
        a cancelled job streams the rows it finished."""
        job = await load(job_id)
        if isinstance(job, JSONResponse):
            return job
        if job.status in ACTIVE and not partial:
            return ApiError(
                409,
                f"job {job.id} is {job.status} ({job.done} of {job.total} rows done); "
                "poll its status or pass ?partial=true",
                "job_not_finished",
            ).response()
        lines: Iterator[bytes] = backend.store.iter_results(job.id, job.total)
        headers = {"X-Batch-Job-Status": job.status}
        return StreamingResponse(lines, media_type="application/x-ndjson", headers=headers)

    @router.delete("/{job_id}", response_model=BatchJobStatus, responses=_errors())
    async def cancel(job_id: str) -> Any:
        """Cancels a queued or running job (rows not yet sent are skipped); an ended job is
        left as it is. Answers the job's status either way."""
        job = await load(job_id)
        if isinstance(job, JSONResponse):
            return job
        await run_in_threadpool(backend.store.cancel, job.id)
        job = await load(job_id)
        return job if isinstance(job, JSONResponse) else _status(job)

    return router
