"""Batch rows (each a `/v1/recommend` body), their limits, and the API's response bodies."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from widebeam.services.gateway.recommender import RecommendLimits, check_limits
from widebeam.services.gateway.schemas.recommend import RecommendRequest
from widebeam.services.gateway.settings import GatewaySettings
from widebeam.services.http.errors import ApiError

# Stored with a row that gave no beam_width: its beam is the gateway's default, resolved at
# submission, and the worker narrows it to the decoders' widest beam as the live route does.
DEFAULTED_BEAM = "beam_width_defaulted"


@dataclass(frozen=True)
class RowLimits:
    """What a row may ask for: `/v1/recommend`'s limits (exclusions included)."""

    recommend: RecommendLimits

    @classmethod
    def from_settings(cls, gateway: GatewaySettings) -> RowLimits:
        return cls(RecommendLimits.from_settings(gateway))


def validation_problems(exc: ValidationError) -> str:
    """`field: problem; ...` of a row that `RecommendRequest` refuses."""
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'request'}: {e['msg']}" for e in exc.errors()
    )


def validate_row(data: Any, limits: RowLimits, job_catalog: str | None) -> dict[str, Any]:
    """The row as a plain dict (defaults and beam width filled in), or ValueError.

    Parsed by the gateway's own `RecommendRequest` and held to `/v1/recommend`'s limits by the
    same `check_limits`, so a row fails here exactly when the live route would refuse it; only
    the decoders' narrower beam limit is left to the worker (a row without beam_width is marked
    `DEFAULTED_BEAM`, and its default beam narrowed to it there)."""
    if not isinstance(data, dict):
        raise ValueError("a recommend request must be a JSON object")
    try:
        row = RecommendRequest.model_validate(data)
    except ValidationError as exc:
        raise ValueError(validation_problems(exc)) from None
    cap = limits.recommend.max_beam_width
    try:
        beam = check_limits(row, limits.recommend, cap, "the gateway's limit")
    except ApiError as exc:
        raise ValueError(exc.message) from None
    if job_catalog is not None and "catalog" not in row.model_fields_set:
        row.catalog = job_catalog
    # Resolved now: the worker does not see the gateway's settings.
    defaulted = row.beam_width is None
    row.beam_width = beam
    stored = row.model_dump(exclude_none=True)
    return stored | {DEFAULTED_BEAM: True} if defaulted else stored


class BatchJobRequest(BaseModel):
    """JSON form of `POST /v1/batch-jobs` (the JSONL upload carries one row per line)."""

    requests: list[dict[str, Any]] = Field(description="recommend request bodies")
    catalog: str | None = Field(None, description="catalog of the rows that name none")


class BatchJobCreated(BaseModel):
    id: str
    status: str


class BatchJobStatus(BaseModel):
    id: str
    status: str = Field(
        description="queued | running | succeeded | completed_with_errors | failed | cancelled"
    )
    total: int
    done: int = Field(description="rows with a result (errors included)")
    failed: int = Field(description="rows whose result is an error")
    retries: int = Field(0, description="times the failed rows were queued again")
    deadline_at: float | None = Field(
        None, description="unix seconds; until then rows wait for unavailable decoders"
    )
    created_at: float = Field(description="unix seconds")
    updated_at: float
    catalog: str | None
    chunk_size: int
    num_chunks: int
    expires_in_s: int | None = Field(description="seconds until the job and its results expire")


class BatchJobList(BaseModel):
    """`GET /v1/batch-jobs`: one page of the caller's jobs, newest first."""

    object: str = Field("list", description="always 'list'")
    data: list[BatchJobStatus] = Field(description="jobs, newest first")
    first_id: str | None = Field(description="id of the first job of the page (None: empty)")
    last_id: str | None = Field(description="id of the last job: the next page's `after`")
    has_more: bool = Field(description="older jobs follow: ask again with after=last_id")


class BatchJobRetried(BatchJobStatus):
    requeued: int = Field(description="rows queued again by this call (0: nothing to retry)")
