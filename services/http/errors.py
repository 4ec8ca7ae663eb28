"""`ApiError`: every failure a client can cause or observe, with an explicit HTTP status, a
stable machine-readable `code`, a message saying what to fix, and the field it names (`param`).

The body is OpenAI's, `{"error": {"message", "type", "code", "param"}}`, so OpenAI clients
raise their usual exceptions; `type` follows from the status."""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse

# status -> OpenAI-style error "type"
_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    502: "upstream_error",
    503: "service_unavailable_error",
}


def error_type(status: int) -> str:
    return _TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        code: str,
        *,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.param = param
        self.headers = headers or {}

    @property
    def type(self) -> str:
        return error_type(self.status)

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.type, self.code, self.param)

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def error_body(message: str, type_: str, code: str, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "code": code, "param": param}}


def bad_request(message: str, code: str = "invalid_value", param: str | None = None) -> ApiError:
    return ApiError(400, message, code, param=param)


def retry_later(
    status: int, message: str, code: str, retry_after_s: int, param: str | None = None
) -> ApiError:
    """An error the client should retry after `retry_after_s` seconds (`Retry-After`)."""
    return ApiError(status, message, code, param=param, headers={"Retry-After": str(retry_after_s)})
