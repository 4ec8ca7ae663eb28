"""Exception handlers: every error leaves in the OpenAI shape `{"error": {message, type, code,
param}}`. Invalid requests are 400 with the field named; only a gateway bug is a 500."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from widebeam.services.gateway.errors import ApiError, error_body

log = logging.getLogger(__name__)

_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}
_MAX_LISTED = 5


def install_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ApiError, _api_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _http_error)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, _unexpected)


async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
    return exc.response()


async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    error = ApiError(exc.status_code, str(exc.detail), _HTTP_CODES.get(exc.status_code, "error"))
    return JSONResponse(error.body(), status_code=exc.status_code, headers=exc.headers)


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    body = error_body("internal error in the gateway", "api_error", "internal_error")
    return JSONResponse(body, status_code=500)


async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    errors: Sequence[dict[str, Any]] = exc.errors()
    first = errors[0] if errors else {}
    if first.get("type") == "json_invalid":
        where = [p for p in first.get("loc", ()) if isinstance(p, int)]
        at = f" at character {where[0]}" if where else ""
        message = f"malformed JSON body: {first.get('ctx', {}).get('error', 'cannot parse')}{at}"
        return ApiError(400, message, "invalid_json").response()
    messages = [_describe(e) for e in errors[:_MAX_LISTED]]
    if len(errors) > _MAX_LISTED:
        messages.append(f"(+{len(errors) - _MAX_LISTED} more)")
    param = _field(first) or None
    return ApiError(400, "; ".join(messages), "invalid_request", param=param).response()


def _field(error: dict[str, Any]) -> str:
    loc = [str(p) for p in error.get("loc", ()) if p != "body"]
    return ".".join(loc)


def _describe(error: dict[str, Any]) -> str:
    field, kind = _field(error), error.get("type", "")
    if kind == "extra_forbidden":
        return f"unknown field {field!r} (not supported by this API)"
    if kind == "missing" and not field:
        return "the request body is required (a JSON object)"
    if kind == "model_attributes_type" and not field:
        return "the request body must be a JSON object"
    message = str(error.get("msg", "invalid value")).removeprefix("Value error, ")
    return f"{field}: {message}" if field else message
