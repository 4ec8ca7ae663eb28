"""``POST /v1/catalogs/{name}/versions``: stream, validate, build and publish a catalog."""

from __future__ import annotations

import logging
import time
from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect

from widebeam.services.catalog.formats import FORMATS
from widebeam.services.catalog.service import pipeline
from widebeam.services.catalog.service.body import read_body
from widebeam.services.catalog.service.errors import to_api_error
from widebeam.services.catalog.service.models import TrieStats, UploadResult, layout_model
from widebeam.services.catalog.service.options import parse_options
from widebeam.services.catalog.service.spool import SpooledUpload, UploadTooLarge
from widebeam.services.catalog.service.state import State
from widebeam.services.catalog.store import validate_name
from widebeam.services.http.api_keys import ApiKeyDependency
from widebeam.services.http.error_schema import error_responses
from widebeam.services.http.errors import ApiError

log = logging.getLogger("widebeam.catalog.service")

_RAW_TYPES = ("application/octet-stream", "application/x-ndjson", "text/csv", "application/gzip")
_BODY_DOC: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "description": "multipart/form-data with a `file` part (options as form fields), or "
        "the catalog file itself as the body (options as query parameters). gzip is detected.",
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file"],
                    "properties": {
                        "file": {"type": "string", "format": "binary"},
                        "format": {"type": "string", "enum": list(FORMATS)},
                        "sid_layout": {"type": "string"},
                        "codebook_size": {"type": "integer"},
                        "activate": {"type": "boolean", "default": True},
                        "metadata": {"type": "string", "description": "JSON object"},
                    },
                }
            },
            **{ct: {"schema": {"type": "string", "format": "binary"}} for ct in _RAW_TYPES},
        },
    }
}
_ERRORS = error_responses(
    {
        400: "bad request: name, options, layout spec, or no layout available",
        401: "missing or wrong API key",
        413: "body over the size limit; nothing published",
        422: "invalid catalog (message names the row/key); nothing published",
        503: "Redis unavailable, or it lost the publish's state (catalog_state_lost); "
        "nothing published; retry after Retry-After seconds",
    }
)


def create_router(require_write_key: ApiKeyDependency) -> APIRouter:
    """`POST /v1/catalogs/{name}/versions`, guarded by `require_write_key`."""
    router = APIRouter(tags=["catalogs"])

    @router.post(
        "/v1/catalogs/{name}/versions",
        status_code=201,
        response_model=UploadResult,
        responses=_ERRORS,
        openapi_extra=_BODY_DOC,
        dependencies=[Depends(require_write_key)],
        summary="Upload a catalog as a new version",
    )
    async def upload_version(
        name: str,
        request: Request,
        state: State,
        # Declared for OpenAPI and type checks only: parse_options reads them from the query
        # string together with multipart form fields, so both body shapes share one code path.
        format: str | None = Query(None, description="raw body only: input format"),
        sid_layout: str | None = Query(None, description="raw body only: BASE:SIZE,..."),
        codebook_size: int | None = Query(None, description="raw body only: codebook size C"),
        activate: bool = Query(True, description="raw body only: make it current"),
        metadata: str | None = Query(None, description="raw body only: JSON object"),
    ) -> UploadResult:
        settings = state.settings
        spool = SpooledUpload(
            settings.max_upload_bytes, settings.spool_memory_bytes, settings.spool_dir
        )
        outcome = "error"
        try:
            validate_name(name)
            query = dict(request.query_params)
            if "multipart/form-data" not in request.headers.get("content-type", ""):
                parse_options(query, {})  # reject bad options before reading a large body
            body = await read_body(request, spool)
            options = parse_options(query, body.fields)
            layout = await run_in_threadpool(
                pipeline.resolve_layout, state, name, options.sid_layout
            )
            async with state.build_slots:
                started = time.perf_counter()
                try:
                    trie, fmt = await run_in_threadpool(
                        pipeline.build,
                        spool.source(),
                        options,
                        layout,
                        settings.max_inflated_bytes,
                        settings.max_items,
                    )
                finally:
                    build_s = time.perf_counter() - started
                    state.metrics.build_seconds.observe(build_s)
            spool.close()  # the trie is built; free the body before the publish
            started = time.perf_counter()
            source = pipeline.source_info(fmt, spool.size, body.filename)
            published = await run_in_threadpool(
                pipeline.publish, state, name, trie, options, source
            )
            publish_s = time.perf_counter() - started
            state.metrics.publish_seconds.observe(publish_s)
            outcome = "published"
        except ClientDisconnect:
            outcome = "aborted"
            raise ApiError(400, "the client disconnected during the upload", "aborted") from None
        except UploadTooLarge as exc:
            outcome = "too_large"
            raise ApiError(413, f"{exc}; nothing was published", "too_large") from None
        except Exception as exc:
            err = to_api_error(exc)
            if err is not None:
                outcome = {422: "invalid", 503: "unavailable"}.get(err.status, "bad_request")
                log.info("catalog %r: upload rejected (%d %s): %s", name, err.status, err.code, err)
            raise
        finally:
            spool.close()
            state.metrics.uploads.labels(outcome).inc()
            state.metrics.upload_bytes.inc(spool.size)
        log.info(
            "catalog %r: published version %d (%s, %d items, %.0f bytes, build %.2fs, "
            "publish %.2fs, current=%s)",
            name, published.version, fmt, trie.num_items, spool.size, build_s, publish_s,
            published.activated,
        )  # fmt: skip
        return UploadResult(
            name=name,
            version=published.version,
            content_hash=published.content_hash,
            stats=TrieStats(**published.manifest["stats"]),
            activated=published.activated,
            format=fmt,
            layout=layout_model(layout.to_dict(), layout.to_spec()),
        )

    return router
