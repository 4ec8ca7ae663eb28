"""HTTP error mapping: every error body is ``{"error": {"code": ..., "message": ...}}``.

Status codes (docs/catalog.md): 400 a malformed request (bad name, parameter, layout spec,
metadata, no layout at all); 401 missing/wrong API key; 404 unknown catalog/version/item/SID;
413 upload over the size limit; 422 an invalid catalog (every ``CatalogError``, whose message
names the row/key); 503 Redis unreachable, or Redis lost a publish's state before its commit
(both with ``Retry-After``). Nothing a client sends may produce a 500.
"""

from __future__ import annotations

import logging

import redis
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from widebeam.services.catalog.store import (
    InvalidNameError,
    StagingLostError,
    VersionNotFoundError,
)
from widebeam.services.catalog.types import CatalogError

log = logging.getLogger("widebeam.catalog.service")

RETRY_AFTER_S = 5
# After a lost publish Redis answers again (it replied to the commit): upload again at once.
RETRY_LOST_PUBLISH_S = 1
# Catalog errors quote the offending value (an item id, a key); a hostile upload can make that
# value megabytes long, and it must not come back in the response or go to the log whole.
MAX_MESSAGE_CHARS = 1000
_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 401: "unauthorized"}


class ApiError(Exception):
    """An error with its HTTP status, stable machine-readable ``code`` and human message."""

    def __init__(
        self, status: int, code: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    body = {"error": {"code": code, "message": message}}
    return JSONResponse(body, status_code=status, headers=headers)


def clip(message: str) -> str:
    if len(message) <= MAX_MESSAGE_CHARS:
        return message
    return f"{message[:MAX_MESSAGE_CHARS]}... ({len(message) - MAX_MESSAGE_CHARS} more characters)"


def to_api_error(exc: BaseException) -> ApiError | None:
    """The ApiError for a known exception type; None for a genuine server bug."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, CatalogError):
        return ApiError(422, "invalid_catalog", clip(str(exc)))
    if isinstance(exc, InvalidNameError):
        return ApiError(400, "invalid_name", str(exc))
    if isinstance(exc, VersionNotFoundError):
        return ApiError(404, "not_found", str(exc))
    if isinstance(exc, StagingLostError):
        log.warning("%s", exc)
        return ApiError(
            503, "catalog_state_lost", str(exc), {"Retry-After": str(RETRY_LOST_PUBLISH_S)}
        )
    if isinstance(exc, redis.RedisError):
        # Only the exception type: redis-py messages can carry host names, never the password.
        log.warning("Redis unavailable: %s: %s", type(exc).__name__, exc)
        return ApiError(
            503,
            "redis_unavailable",
            f"the catalog store (Redis) is unavailable ({type(exc).__name__}); retry later",
            {"Retry-After": str(RETRY_AFTER_S)},
        )
    return None


async def _known(request: Request, exc: Exception) -> JSONResponse:
    err = to_api_error(exc)
    assert err is not None  # only registered for the types to_api_error knows
    return error_response(err.status, err.code, err.message, err.headers)


async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    return error_response(exc.status_code, code, str(exc.detail), getattr(exc, "headers", None))


async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
    problems = []
    for e in exc.errors():
        where = ".".join(str(p) for p in e.get("loc", ()) if p != "body") or "request"
        problems.append(f"{where}: {e.get('msg', 'invalid')}")
    return error_response(400, "invalid_request", "; ".join(problems) or "invalid request")


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    # Starlette logs the traceback after this handler; the client gets the usual error shape.
    return error_response(500, "internal", "internal error; the service log has the details")


def install_error_handlers(app: FastAPI) -> None:
    known = (ApiError, CatalogError, InvalidNameError, VersionNotFoundError, StagingLostError)
    for exc_type in known:
        app.add_exception_handler(exc_type, _known)
    app.add_exception_handler(redis.RedisError, _known)
    app.add_exception_handler(StarletteHTTPException, _http)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _validation)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, _unexpected)
