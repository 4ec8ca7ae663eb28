"""Reading a batch submission: a JSON body, a JSONL upload, or a raw JSONL body.

Every row is validated before anything is stored, and every problem is a `BadSubmission`
naming where it is (`requests[3]` or `line 4`), so a bad row never enqueues half a job. JSON
is read by the gateway's one strict parser (`strict_json`: duplicate keys, NaN, an integer of
thousands of digits or nesting too deep for the parser are 400s)."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException

from widebeam.services.gateway.batch.schemas import RowLimits, validate_row
from widebeam.services.http import strict_json

JSONL_TYPES = ("application/x-ndjson", "application/jsonl", "application/x-jsonlines")


class BadSubmission(ValueError):
    def __init__(self, message: str, status: int = 400, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.param = param


async def _read_limited(request: Request, limit: int) -> bytes:
    body = bytearray()
    async for piece in request.stream():
        body += piece
        if len(body) > limit:
            raise BadSubmission(f"the request body is over {limit} bytes", 413)
    return bytes(body)


def _check_rows(rows: list[dict[str, Any]], limits: RowLimits, max_rows: int) -> None:
    if not rows:
        raise BadSubmission("a batch job needs at least one request", param="requests")
    if len(rows) > max_rows:
        raise BadSubmission(f"{len(rows)} requests, the limit is {max_rows}", 413, "requests")


def parse_json(body: bytes, limits: RowLimits, max_rows: int) -> tuple[list[dict], str | None]:
    """Rows of `{"requests": [...], "catalog"?}`; the job catalog applies to rows naming none."""
    try:
        data = strict_json.loads(body)
    except strict_json.StrictJsonError as exc:
        raise BadSubmission(f"malformed JSON body: {exc}", param=exc.key) from None
    if not isinstance(data, dict) or not isinstance(data.get("requests"), list):
        raise BadSubmission('the body must be {"requests": [...], "catalog"?: "..."}')
    unknown = sorted(set(data) - {"requests", "catalog"})
    if unknown:
        raise BadSubmission(f"unknown fields: {', '.join(unknown)}", param=unknown[0])
    catalog = data.get("catalog") or None
    if catalog is not None and not isinstance(catalog, str):
        raise BadSubmission("catalog: must be a string", param="catalog")
    _check_rows(data["requests"], limits, max_rows)
    rows = []
    for i, item in enumerate(data["requests"]):
        try:
            rows.append(validate_row(item, limits, catalog))
        except ValueError as exc:
            raise BadSubmission(f"requests[{i}]: {exc}", param=f"requests[{i}]") from None
    return rows, catalog


def parse_jsonl(
    body: bytes, limits: RowLimits, max_rows: int, catalog: str | None
) -> list[dict[str, Any]]:
    """One request per line; blank lines are skipped; errors name the 1-based line."""
    rows: list[dict[str, Any]] = []
    for number, raw in enumerate(body.splitlines(), start=1):
        if not raw.strip():
            continue
        if len(rows) >= max_rows:
            raise BadSubmission(f"more than {max_rows} requests", 413, "file")
        try:
            rows.append(validate_row(strict_json.loads(raw), limits, catalog))
        except strict_json.StrictJsonError as exc:
            raise BadSubmission(f"line {number}: invalid JSON: {exc}", param="file") from None
        except ValueError as exc:
            raise BadSubmission(f"line {number}: {exc}", param="file") from None
    _check_rows(rows, limits, max_rows)
    return rows


async def read_submission(
    request: Request, limits: RowLimits, max_rows: int, max_bytes: int
) -> tuple[list[dict[str, Any]], str | None]:
    """(validated rows, job catalog) of a `POST /v1/batch-jobs`, or `BadSubmission`."""
    declared = request.headers.get("content-length")
    # Multipart adds boundaries and part headers around the file; allow a little for them.
    if declared and declared.isdigit() and int(declared) > max_bytes + 64 * 1024:
        raise BadSubmission(f"the request body is over {max_bytes} bytes", 413)
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type == "multipart/form-data":
        try:
            async with request.form(max_files=1, max_fields=8) as form:
                upload, form_catalog = form.get("file"), form.get("catalog")
                if not isinstance(upload, UploadFile):
                    message = "multipart uploads need a 'file' part (JSONL)"
                    raise BadSubmission(message, param="file")
                body = await upload.read(max_bytes + 1)
        except HTTPException as exc:
            raise BadSubmission(f"malformed multipart body: {exc.detail}") from None
        if len(body) > max_bytes:
            raise BadSubmission(f"the uploaded file is over {max_bytes} bytes", 413, "file")
        catalog = form_catalog if isinstance(form_catalog, str) and form_catalog else None
        return await run_in_threadpool(parse_jsonl, body, limits, max_rows, catalog), catalog
    body = await _read_limited(request, max_bytes)
    if content_type in JSONL_TYPES:
        catalog = request.query_params.get("catalog") or None
        return await run_in_threadpool(parse_jsonl, body, limits, max_rows, catalog), catalog
    if content_type not in ("application/json", ""):
        raise BadSubmission(
            f"unsupported content type {content_type!r}: send application/json, "
            "multipart/form-data with a JSONL 'file', or application/x-ndjson",
            415,
        )
    # Validating up to max_rows rows is CPU work: keep it off the event loop.
    return await run_in_threadpool(parse_json, body, limits, max_rows)
