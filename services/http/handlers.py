"""Exception handlers: every error leaves as the `ApiError` body. Invalid requests are 400 with
the field named; a service's own exception types are translated by the function it passes;
only a bug in the service is a 500 (logged, its details never sent)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from widebeam.services.http.errors import ApiError, error_body

log = logging.getLogger(__name__)

# Errors Starlette raises itself (unknown route, wrong method, ...).
_HTTP_CODES = {
    401: "unauthorized",
    404: "not_found",
    405: "method_not_allowed",
    413: "request_too_large",
}
_MAX_LISTED = 5

# A service's exception -> its ApiError; None for a genuine bug (answered 500).
Translate = Callable[[BaseException], ApiError | None]


def install_error_handlers(
    app: FastAPI,
    service: str,
    translate: Translate | None = None,
    translated: Sequence[type[BaseException]] = (),
) -> None:
    """`service` names the 500 message; `translated` exception types go through `translate`."""

    async def known(request: Request, exc: Exception) -> JSONResponse:
        error = translate(exc) if translate is not None else None
        if error is None:
            return await unexpected(request, exc)
        return error.response()

    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        message = f"internal error in the {service}; its log has the details"
        return JSONResponse(error_body(message, "api_error", "internal_error"), status_code=500)

    app.add_exception_handler(ApiError, _api_error)  # type: ignore[arg-type]
    for exc_type in translated:
        app.add_exception_handler(exc_type, known)
    app.add_exception_handler(RequestValidationError, _validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _http_error)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, unexpected)


async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
    return exc.response()


async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    error = ApiError(exc.status_code, str(exc.detail), code, headers=exc.headers)
    return error.response()


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
    message = "; ".join(messages) or "invalid request"
    return ApiError(400, message, "invalid_request", param=param).response()


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
