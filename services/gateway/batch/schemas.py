"""Batch rows (each a `/v1/recommend` body), their limits, and the API's response bodies."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from widebeam.services.gateway.batch.settings import BatchSettings
from widebeam.services.gateway.schemas.recommend import RecommendRequest


@dataclass(frozen=True)
class RowLimits:
    max_n: int
    max_beam_width: int
    max_history_len: int
    max_exclude: int
    default_beam_width: int

    @classmethod
    def from_settings(cls, gateway: object, batch: BatchSettings) -> RowLimits:
        """The gateway's limits where its settings define them, else the batch defaults."""

        def pick(names: tuple[str, ...], default: int) -> int:
            for name in names:
                value = getattr(gateway, name, None)
                if isinstance(value, int) and value > 0:
                    return value
            return default

        return cls(
            max_n=pick(("max_n",), batch.max_n),
            max_beam_width=pick(("max_beam_width",), batch.max_beam_width),
            max_history_len=pick(("max_history_len", "max_history"), batch.max_history_len),
            max_exclude=pick(("max_exclude",), batch.max_exclude),
            default_beam_width=pick(("default_beam_width",), batch.default_beam_width),
        )


def validate_row(data: Any, limits: RowLimits, job_catalog: str | None) -> dict[str, Any]:
    """The row as a plain dict (defaults and beam width filled in), or ValueError.

    Parsed by the gateway's own `RecommendRequest` and held to the limits `/v1/recommend`
    checks (`recommender.check_limits`), so a row fails here exactly when the live route
    would refuse it; only the decoders' narrower beam limit is left to the worker."""
    if not isinstance(data, dict):
        raise ValueError("a recommend request must be a JSON object")
    try:
        row = RecommendRequest.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'request'}: {e['msg']}" for e in exc.errors()
        )
        raise ValueError(problems) from None
    if row.n > limits.max_n:
        raise ValueError(f"n must be <= {limits.max_n} (the gateway's limit)")
    if row.beam_width is not None and row.beam_width > limits.max_beam_width:
        raise ValueError(f"beam_width must be <= {limits.max_beam_width} (the gateway's limit)")
    beam = row.beam_width or min(max(row.n, limits.default_beam_width), limits.max_beam_width)
    if row.n > beam:
        raise ValueError(f"n ({row.n}) must be <= beam_width ({beam})")
    if len(row.history) > limits.max_history_len:
        limit = limits.max_history_len
        raise ValueError(f"history has {len(row.history)} items; the limit is {limit}")
    if not row.history and row.fallback == "none":
        raise ValueError(
            "history is empty; give at least one item id, or set fallback='prior' to get the "
            "model's unconditional recommendations"
        )
    if len(row.exclude) > limits.max_exclude:
        raise ValueError(f"exclude has {len(row.exclude)} items; the limit is {limits.max_exclude}")
    if job_catalog is not None and "catalog" not in row.model_fields_set:
        row.catalog = job_catalog
    # Resolved now: the worker does not see the gateway's settings.
    row.beam_width = beam
    return row.model_dump(exclude_none=True)


class BatchJobRequest(BaseModel):
    """JSON form of `POST /v1/batch-jobs` (the JSONL upload carries one row per line)."""

    requests: list[dict[str, Any]] = Field(description="recommend request bodies")
    catalog: str | None = Field(None, description="catalog of the rows that name none")


class BatchJobCreated(BaseModel):
    id: str
    status: str


class BatchJobStatus(BaseModel):
    id: str
    status: str = Field(description="queued | running | succeeded | failed | cancelled")
    total: int
    done: int = Field(description="rows with a result (errors included)")
    failed: int = Field(description="rows whose result is an error")
    created_at: float = Field(description="unix seconds")
    updated_at: float
    catalog: str | None
    chunk_size: int
    num_chunks: int
    expires_in_s: int | None = Field(description="seconds until the job and its results expire")
