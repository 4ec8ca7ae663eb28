"""The one error type of the gateway and its OpenAI-compatible body.

Every failure a client can cause or observe is an `ApiError` with an explicit status, so the
exception handlers never have to guess; anything else reaching them is a gateway bug."""

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
        return _TYPES.get(
            self.status, "invalid_request_error" if self.status < 500 else "api_error"
        )

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.type, self.code, self.param)

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def error_body(message: str, type_: str, code: str, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "code": code, "param": param}}


def bad_request(message: str, code: str = "invalid_value", param: str | None = None) -> ApiError:
    return ApiError(400, message, code, param=param)


def retry_later(status: int, message: str, code: str, retry_after_s: int) -> ApiError:
    return ApiError(status, message, code, headers={"Retry-After": str(retry_after_s)})
