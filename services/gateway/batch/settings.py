"""Batch-job settings (`WIDEBEAM_BATCH_*`), shared by the gateway routes and the Celery worker."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from widebeam.services.comma_separated import split_commas


class BatchSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="WIDEBEAM_BATCH_", extra="forbid", env_ignore_empty=True
    )

    redis_url: str = Field("redis://127.0.0.1:6379/0", description="broker, results, job store")
    namespace: str = Field("widebeam:batch", description="prefix of the job-store keys")
    queue: str = Field("widebeam.batch", description="Celery queue of the chunk tasks")
    decoder_addresses: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["127.0.0.1:50051"],
        description="decoder gRPC addresses, comma-separated (workers only)",
    )
    chunk_size: int = Field(20, ge=1, le=10_000, description="rows per Celery task")
    result_ttl_s: int = Field(
        7 * 86400, ge=1, description="job keys expire this long after the job's last change"
    )
    # One attempt of a row gets this long in all (retries on other replicas and beam widening
    # included); with decoders up a chunk ends within chunk_size * row_budget_s, which the
    # visibility timeout must exceed, or Redis would hand a running chunk out a second time.
    row_budget_s: float = Field(60.0, gt=0)
    rpc_timeout_s: float = Field(30.0, gt=0, description="deadline of one Recommend call")
    # Rows that meet unavailable or overloaded decoders (429/503) wait for them, retried with
    # back-off (retry_delay_s doubling up to retry_delay_max_s), until the job is this old
    # (counted from its submission, or from its last retry-failed); then that answer is the
    # row's result, and the job ends completed_with_errors.
    job_deadline_s: float = Field(
        86400.0, gt=0, description="how long a job's rows wait for decoders to come back"
    )
    retry_delay_s: float = Field(5.0, ge=0, description="first wait for an unavailable decoder")
    retry_delay_max_s: float = Field(60.0, ge=0, description="longest wait between row attempts")
    # A running chunk holds a lease in the job store, renewed every lease_s / 3; a lease that
    # runs out (worker killed or hung) is found by a worker's watchdog within
    # watchdog_interval_s and the chunk sent again, so a lost worker's chunk resumes within
    # about lease_s + watchdog_interval_s. The broker's own redelivery (visibility timeout)
    # stays as a last resort; a redelivered chunk whose lease is alive is dropped at once.
    lease_s: float = Field(30.0, gt=0, description="lease of a running chunk")
    watchdog_interval_s: float = Field(5.0, gt=0, description="how often watchdogs look")
    lost_chunk_grace_s: float = Field(
        60.0, gt=0, description="a chunk queued this long while the queue is empty is sent again"
    )
    visibility_timeout_s: int = Field(
        3600, ge=1, description="the broker redelivers an unacked chunk after this"
    )
    restore_interval_s: int = Field(
        10, ge=1, description="how often workers sweep for unacked chunks to redeliver"
    )
    # Redis restarts (an operator's, a failover) and refusals (out of memory, read-only,
    # loading: see redis_errors) are ridden out by retrying each job-store command and broker
    # operation; longer ones hand the chunk back to the queue (workers) or answer 503 (API).
    redis_retry_s: float = Field(
        10.0, ge=0, description="how long a worker's job-store command waits out a Redis outage"
    )
    api_redis_retry_s: float = Field(
        1.0, ge=0, description="the same for the gateway's batch routes (then 503)"
    )
    max_job_rows: int = Field(100_000, ge=1)
    max_upload_bytes: int = Field(64 << 20, ge=1024, description="request body / JSONL upload")
    # Rows are held to the gateway's /v1/recommend limits at submission (max_exclude included);
    # this one is the batch's.
    max_beam_width: int = Field(
        512, ge=1, description="widest beam a worker widens a row to (decoders' limit applies too)"
    )
    # Worker process.
    concurrency: int = Field(1, ge=1, description="chunks run at once per worker")
    rows_in_flight: int = Field(8, ge=1, description="rows of one chunk sent to decoders at once")
    pool: Literal["auto", "solo", "threads", "prefork"] = Field(
        "auto", description="auto: solo at concurrency 1, else threads"
    )
    loglevel: str = "INFO"

    @field_validator("decoder_addresses", mode="before")
    @classmethod
    def _split_addresses(cls, value: object) -> object:
        return split_commas(value)

    @field_validator("decoder_addresses")
    @classmethod
    def _some_address(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("at least one decoder address is needed")
        return value

    @model_validator(mode="after")
    def _visibility_above_longest_chunk(self) -> BatchSettings:
        longest = self.chunk_size * self.row_budget_s
        if self.visibility_timeout_s <= longest:
            raise ValueError(
                f"visibility_timeout_s ({self.visibility_timeout_s}) must exceed the longest "
                f"chunk, chunk_size * row_budget_s = {longest:g}s"
            )
        return self

    @property
    def resolved_pool(self) -> str:
        if self.pool != "auto":
            return self.pool
        return "solo" if self.concurrency == 1 else "threads"
