"""Upload options: query parameters (raw body) or form fields (multipart), never both."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from widebeam.services.catalog.formats import FORMATS
from widebeam.services.http import strict_json
from widebeam.services.http.errors import ApiError

RESERVED_METADATA = "source"  # the service records the upload's format/size/filename there
MAX_METADATA_DEPTH = 32  # nesting of the metadata object (the object itself is level 1)


class UploadOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: str | None = Field(None, description=f"one of {list(FORMATS)}; default: auto-detect")
    sid_layout: str | None = Field(
        None,
        description="BASE:SIZE,...[;begin=ID;end=ID]; default: the current version's layout, "
        "else the service's configured layout",
    )
    codebook_size: int | None = Field(None, ge=1, description="per-level codebook size C")
    activate: bool = Field(True, description="make the new version current")
    metadata: dict[str, Any] | None = Field(None, description="JSON object kept in the manifest")

    @field_validator("format")
    @classmethod
    def _known_format(cls, value: str | None) -> str | None:
        if value is not None and value not in FORMATS:
            raise ValueError(f"unknown format {value!r}; expected one of {list(FORMATS)}")
        return value

    @field_validator("metadata", mode="before")
    @classmethod
    def _json_object(cls, value: object) -> object:
        if isinstance(value, str):
            try:
                value = strict_json.loads(value, max_depth=MAX_METADATA_DEPTH)
            except strict_json.StrictJsonError as exc:
                raise ValueError(f"not valid JSON ({exc})") from None
        if value is not None and not isinstance(value, dict):
            raise ValueError("must be a JSON object")
        if isinstance(value, dict) and RESERVED_METADATA in value:
            raise ValueError(f"key {RESERVED_METADATA!r} is reserved for the service")
        return value

    @field_validator("sid_layout", "format", mode="before")
    @classmethod
    def _blank_is_none(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value


OPTION_NAMES = frozenset(UploadOptions.model_fields)


def parse_options(query: Mapping[str, str], fields: Mapping[str, str]) -> UploadOptions:
    """Options from query parameters and multipart fields; 400 on unknown/duplicate/invalid."""
    for where, names in (("query parameter", query), ("form field", fields)):
        unknown = sorted(set(names) - OPTION_NAMES)
        if unknown:
            raise ApiError(
                400,
                f"unknown {where}(s) {unknown}; expected {sorted(OPTION_NAMES)}",
                "invalid_request",
                param=unknown[0],
            )
    both = sorted(set(query) & set(fields))
    if both:
        message = f"option(s) {both} given as query and form field"
        raise ApiError(400, message, "invalid_request", param=both[0])
    try:
        return UploadOptions.model_validate({**query, **fields})
    except ValidationError as exc:
        errors = exc.errors()
        where = [".".join(str(p) for p in e["loc"]) for e in errors]
        pairs = zip(where, errors, strict=True)
        problems = "; ".join(f"{w or 'options'}: {e['msg']}" for w, e in pairs)
        raise ApiError(400, problems, "invalid_request", param=where[0] or None) from None
