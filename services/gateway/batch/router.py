"""`/v1/batch-jobs`: submit recommend requests in bulk, list them, follow progress, stream
results, cancel, retry the failed rows.

Mounted by the gateway's `create_app` under its `/v1` router (API-key dependency included) via
`create_batch_router(batch_settings, row_limits, api_keys)`; with keys configured a job answers
only the key that created it (`ownership`). The routes only talk to Redis (job store + Celery
broker, `backend`); `widebeam worker` does the decoding."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import redis
from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from widebeam.services.gateway.batch.backend import BatchBackend
from widebeam.services.gateway.batch.job_ids import JOB_ID
from widebeam.services.gateway.batch.job_listing import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    UnknownCursor,
    list_jobs,
)
from widebeam.services.gateway.batch.job_store import ACTIVE, CANCELLED, JobRecord
from widebeam.services.gateway.batch.ownership import owner_resolver, visible_to
from widebeam.services.gateway.batch.schemas import (
    BatchJobCreated,
    BatchJobList,
    BatchJobRequest,
    BatchJobRetried,
    BatchJobStatus,
    RowLimits,
)
from widebeam.services.gateway.batch.settings import BatchSettings
from widebeam.services.gateway.batch.uploads import BadSubmission, read_submission
from widebeam.services.gateway.settings import GatewaySettings
from widebeam.services.http.api_keys import ApiKeyCheck
from widebeam.services.http.error_schema import error_responses
from widebeam.services.http.errors import ApiError, retry_later

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
        404: "unknown or expired job (or one another API key created)",
        503: "the job store or broker is unavailable (see Retry-After)",
    }
    return error_responses(common | (extra or {}))


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


def create_batch_router(
    batch: BatchSettings, limits: RowLimits, api_keys: ApiKeyCheck | None = None
) -> APIRouter:
    """The routes; rows are held to `limits` at submission (workers reach the decoders
    themselves). The includer adds the API-key dependency, as for every `/v1` router;
    `api_keys` (the same check) makes jobs their creating key's: others get 404."""
    backend = BatchBackend(batch)
    owner_of = owner_resolver(api_keys)
    router = APIRouter(prefix="/v1/batch-jobs", tags=["batch jobs"])

    async def load(job_id: str, request: Request) -> JobRecord | JSONResponse:
        if not JOB_ID.match(job_id):
            return _not_found(job_id)
        try:
            job = await run_in_threadpool(backend.store.get, job_id)
        except redis.RedisError:
            return _store_down()
        if job is None or not visible_to(job, owner_of(request)):
            return _not_found(job_id)
        return job

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
        owner = owner_of(request) or ""
        try:
            job = await run_in_threadpool(backend.submit, rows, catalog, owner)
        except Exception:  # Redis or the broker is down: nothing usable was enqueued
            return _store_down()
        return JSONResponse({"id": job.id, "status": job.status}, status_code=202)

    @router.get(
        "",
        response_model=BatchJobList,
        responses=_errors({400: "bad `limit` or `after` (the message names it)"}),
    )
    async def listing(
        request: Request,
        limit: int = Query(
            DEFAULT_LIMIT, ge=1, le=MAX_LIMIT, description=f"jobs per page, 1..{MAX_LIMIT}"
        ),
        after: str | None = Query(
            None, description="the previous page's `last_id`: list the jobs older than it"
        ),
    ) -> Any:
        """This API key's jobs (every job when the gateway has no keys), newest first, one page
        at a time: follow `last_id` as `after` while `has_more`. Expired jobs are not listed."""
        if after is not None and not JOB_ID.match(after):
            message = f"after must be a job id (32 hex digits), not {after[:64]!r}"
            return ApiError(400, message, "invalid_value", param="after").response()
        try:
            page = await run_in_threadpool(
                list_jobs, backend.store, owner_of(request), limit, after
            )
        except UnknownCursor:
            message = (
                f"after: no job {after!r} in this API key's list (unknown, expired, or another "
                "key's); list again without after"
            )
            return ApiError(400, message, "invalid_cursor", param="after").response()
        except redis.RedisError:
            return _store_down()
        return BatchJobList(
            data=[_status(job) for job in page.jobs],
            first_id=page.jobs[0].id if page.jobs else None,
            last_id=page.jobs[-1].id if page.jobs else None,
            has_more=page.has_more,
        )

    @router.get("/{job_id}", response_model=BatchJobStatus, responses=_errors())
    async def status(job_id: str, request: Request) -> Any:
        job = await load(job_id, request)
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
        request: Request,
        partial: bool = Query(False, description="stream the rows done so far of a running job"),
    ) -> Response:
        """JSONL in input order, one line per row: the `/v1/recommend` response plus `row`, or
        `{"row", "error"}`. A job still queued or running answers 409 unless `partial=true`;
        a cancelled job streams the rows it finished."""
        job = await load(job_id, request)
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
    async def cancel(job_id: str, request: Request) -> Any:
        """Cancels a queued or running job (rows not yet sent are skipped); an ended job is
        left as it is. Answers the job's status either way."""
        job = await load(job_id, request)
        if isinstance(job, JSONResponse):
            return job
        await run_in_threadpool(backend.store.cancel, job.id)
        job = await load(job_id, request)
        return job if isinstance(job, JSONResponse) else _status(job)

    @router.post(
        "/{job_id}/retry-failed",
        status_code=202,
        response_model=BatchJobRetried,
        responses=_errors({409: "the job was cancelled"}),
    )
    async def retry_failed(job_id: str, request: Request) -> Any:
        """Queues again, and only, the rows of an ended job whose result is an error (or that
        never ran); the job is `queued` again until they have a result, rows that succeeded
        are kept. Idempotent: a job with nothing to retry (still active, succeeded, or
        retried already) is left as it is and answers `requeued: 0`."""
        job = await load(job_id, request)
        if isinstance(job, JSONResponse):
            return job
        if job.status == CANCELLED:
            message = f"job {job.id} was cancelled; submit its rows again as a new job"
            return ApiError(409, message, "job_cancelled").response()
        try:
            outcome = await run_in_threadpool(backend.retry_failed, job.id)
        except redis.RedisError:
            return _store_down()
        if outcome is None:
            return _not_found(job_id)
        job = await load(job_id, request)
        if isinstance(job, JSONResponse):
            return job
        body = BatchJobRetried(**_status(job).model_dump(), requeued=outcome[1])
        return JSONResponse(body.model_dump(), status_code=202)

    return router
