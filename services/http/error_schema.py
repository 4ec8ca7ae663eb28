"""The error body as an OpenAPI model, and the `responses=` table a route documents with it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, Field


class ErrorDetail(BaseModel):
    message: str = Field(examples=["n (10) must be <= beam_width (4)"])
    type: str = Field(examples=["invalid_request_error"])
    code: str = Field(examples=["invalid_value"])
    param: str | None = Field(None, description="the field or parameter the error is about")


class ErrorResponse(BaseModel):
    error: ErrorDetail


def error_responses(descriptions: Mapping[int, str]) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses=` of a route: each status answered with the error body."""
    return {
        status: {"model": ErrorResponse, "description": what}
        for status, what in descriptions.items()
    }
