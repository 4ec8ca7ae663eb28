"""Batch jobs in plain Redis: a job record, its input rows by chunk, its results by row index.

Keys (`P` = settings.namespace), all expiring `result_ttl_s` after the job's last change:
  P:job:{id}          HASH   id, status, total, chunk_size, num_chunks, catalog, timestamps,
                             owner (hash of the creating API key, or ""), deadline_at, retries
  P:job:{id}:rows     HASH   chunk index -> {"start": first row index, "rows": [...]}
  P:job:{id}:results  HASH   row index -> the row's JSON result line (written with HSETNX)
  P:job:{id}:failed   SET    row indexes whose result is an error
A new job's chunks are also entered in the chunks-queued set (`chunk_leases`), in the same
transaction, so a chunk whose broker message is lost is still sent; and the job in its key's
list of jobs (`job_listing`), newest first.

`done` is HLEN of the results and `failed` SCARD of the failed set, so a redelivered chunk
can neither duplicate a row nor count it twice. Status changes are compare-and-set Lua
scripts (`job_scripts`), so a cancel never races a completion into an inconsistent state.
Status: queued -> running -> succeeded | completed_with_errors | failed, or cancelled; a
retry of the failed rows takes completed_with_errors or failed back to queued.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from widebeam.services.gateway.batch import job_scripts
from widebeam.services.gateway.batch.chunk_leases import queue_in, queued_key
from widebeam.services.gateway.batch.job_ids import new_job_id
from widebeam.services.gateway.batch.job_listing import drop_expired_oldest, index_in
from widebeam.services.gateway.batch.redis_errors import RETRIED_TYPES, is_transient

QUEUED, RUNNING = "queued", "running"
SUCCEEDED, COMPLETED_WITH_ERRORS, FAILED, CANCELLED = (
    "succeeded",
    "completed_with_errors",
    "failed",
    "cancelled",
)
ACTIVE = (QUEUED, RUNNING)
TERMINAL = (SUCCEEDED, COMPLETED_WITH_ERRORS, FAILED, CANCELLED)


# Backoff between attempts of a command while Redis is unreachable: 50 ms, doubling, 1 s at most.
_RETRY_BASE_S = 0.025
_RETRY_CAP_S = 1.0
# How long one attempt may wait for Redis: to connect, and for each reply. A Redis that is hung
# (stopped, not dead) accepts connections but never answers; without a timeout each command
# held its caller, and its threadpool thread, until TCP gave up (hours).
SOCKET_TIMEOUT_S = 1.0


class DeadlineRetry(Retry):
    """Retries connection errors and timeouts with capped exponential backoff until `budget_s`
    has passed since the first attempt (0: no retry). Bounded by time, not by a count of
    attempts, so a command ends about `budget_s` after it began whether each attempt fails at
    once (Redis restarting: connection refused) or only after SOCKET_TIMEOUT_S (Redis hung)."""

    def __init__(self, budget_s: float) -> None:
        backoff = ExponentialBackoff(cap=_RETRY_CAP_S, base=_RETRY_BASE_S)
        super().__init__(backoff, retries=-1 if budget_s > 0 else 0)  # -1: the deadline stops
        self.budget_s = budget_s

    def call_with_retry(self, do: Any, fail: Any, *args: Any, **kwargs: Any) -> Any:
        deadline = time.monotonic() + self.budget_s

        def fail_past_deadline(error: Exception, *failures: int) -> None:
            fail(error, *failures)
            if time.monotonic() >= deadline:
                raise error

        # Any transient refusal (out of memory, read-only, loading...) too, not only a lost
        # connection: see redis_errors.
        kwargs.setdefault("is_retryable", is_transient)
        return super().call_with_retry(do, fail_past_deadline, *args, **kwargs)


def retry_policy(budget_s: float) -> Retry:
    """How a job-store client retries (see `DeadlineRetry`). `redis.Redis.from_url` alone
    retries nothing, so one command issued during a Redis restart would fail."""
    return DeadlineRetry(budget_s)


def redis_client(url: str, retry_s: float) -> redis.Redis:
    """A job-store client that rides out a Redis outage (restart, failover) of up to `retry_s`,
    and gives up about `retry_s` (at least SOCKET_TIMEOUT_S) after a command began when Redis
    does not answer, so a caller gets its error (the API: a 503) instead of waiting on a hung
    Redis.

    Every job-store command may be sent twice (the first attempt may have run before the
    connection broke): row writes are HSETNX, status changes compare-and-set, job creation one
    MULTI/EXEC writing the same values, so a repeat changes nothing."""
    return redis.Redis.from_url(
        url,
        retry=retry_policy(retry_s),
        retry_on_error=list(RETRIED_TYPES),
        socket_connect_timeout=SOCKET_TIMEOUT_S,
        socket_timeout=SOCKET_TIMEOUT_S,
        socket_keepalive=True,
        health_check_interval=30,
    )


@dataclass(frozen=True)
class JobRecord:
    id: str
    status: str
    total: int
    done: int
    failed: int
    chunk_size: int
    num_chunks: int
    catalog: str | None
    created_at: float
    updated_at: float
    expires_in_s: int | None
    owner: str  # sha-256 of the creating API key ("": created without keys configured)
    deadline_at: float | None  # rows wait for decoders until then (None: a job of before)
    retries: int  # times its failed rows were queued again


class JobStore:
    def __init__(self, client: redis.Redis, namespace: str, ttl_s: int) -> None:
        self.client = client
        self.namespace = namespace
        self.ttl_s = ttl_s
        self._write_row = client.register_script(job_scripts.WRITE_ROW)
        self._finish = client.register_script(job_scripts.FINISH)
        self._transition = client.register_script(job_scripts.TRANSITION)
        self._retry_failed = client.register_script(job_scripts.RETRY_FAILED)

    @classmethod
    def from_url(cls, url: str, namespace: str, ttl_s: int, retry_s: float = 0.0) -> JobStore:
        """`retry_s`: how long each command waits out a Redis outage (see `redis_client`)."""
        return cls(redis_client(url, retry_s), namespace, ttl_s)

    def keys(self, job_id: str) -> list[str]:
        base = f"{self.namespace}:job:{job_id}"
        return [base, f"{base}:results", f"{base}:failed", f"{base}:rows"]

    def create(
        self,
        rows: list[dict[str, Any]],
        chunk_size: int,
        catalog: str | None,
        *,
        owner: str = "",
        deadline_s: float = 86400.0,
    ) -> JobRecord:
        """A queued job; `owner`: hash of the creating key (`ownership.owner_hash`), `deadline_s`:
        how long its rows wait for decoders (settings.job_deadline_s)."""
        job_id = new_job_id()
        job_key, _, _, rows_key = self.keys(job_id)
        now = time.time()
        chunks = {
            str(k): json.dumps(
                {"start": start, "rows": rows[start : start + chunk_size]}, separators=(",", ":")
            )
            for k, start in enumerate(range(0, len(rows), chunk_size))
        }
        record = {
            "id": job_id,
            "status": "queued",
            "total": len(rows),
            "chunk_size": chunk_size,
            "num_chunks": len(chunks),
            "catalog": catalog or "",
            "created_at": repr(now),
            "updated_at": repr(now),
            "owner": owner,
            "deadline_at": repr(now + deadline_s),
        }
        with self.client.pipeline(transaction=True) as pipe:
            pipe.hset(rows_key, mapping=chunks)
            pipe.expire(rows_key, self.ttl_s)
            pipe.hset(job_key, mapping=record)
            pipe.expire(job_key, self.ttl_s)
            queue_in(pipe, self.namespace, job_id, range(len(chunks)))
            index_in(pipe, self.namespace, job_id, owner, now)
            pipe.execute()
        drop_expired_oldest(self.client, self.namespace, owner)
        return self._record(record, 0, 0, self.ttl_s)

    def get(self, job_id: str) -> JobRecord | None:
        job_key, results_key, failed_key, _ = self.keys(job_id)
        with self.client.pipeline(transaction=True) as pipe:
            pipe.hgetall(job_key).hlen(results_key).scard(failed_key).ttl(job_key)
            fields, done, failed, ttl = pipe.execute()
        if not fields:
            return None
        record = {k.decode(): v.decode() for k, v in fields.items()}
        return self._record(record, done, failed, ttl if ttl >= 0 else None)

    def status(self, job_id: str) -> str | None:
        value = self.client.hget(self.keys(job_id)[0], "status")
        return value.decode() if value is not None else None

    def deadline(self, job_id: str) -> float | None:
        """Until when the job's rows wait for decoders; None for a job stored without one."""
        value = self.client.hget(self.keys(job_id)[0], "deadline_at")
        return float(value) if value else None

    def chunk_rows(self, job_id: str, chunk_index: int) -> tuple[int, list[dict[str, Any]]] | None:
        """(index of the chunk's first row, its rows); None when the job is gone."""
        raw = self.client.hget(self.keys(job_id)[3], str(chunk_index))
        if raw is None:
            return None
        chunk = json.loads(raw)
        return int(chunk["start"]), list(chunk["rows"])

    def present(self, job_id: str, rows: Iterable[int]) -> set[int]:
        """The rows among `rows` whose result is already written."""
        wanted = list(rows)
        results_key = self.keys(job_id)[1]
        with self.client.pipeline(transaction=False) as pipe:
            for row in wanted:
                pipe.hexists(results_key, str(row))
            found = pipe.execute()
        return {row for row, hit in zip(wanted, found, strict=True) if hit}

    def write_row(self, job_id: str, row: int, result: dict[str, Any], is_error: bool) -> int:
        """1: written; 0: the row was already there (left as it was); -1: the job is gone."""
        line = json.dumps({"row": row, **result}, separators=(",", ":"))
        args = [row, line, "1" if is_error else "0", self.ttl_s, repr(time.time())]
        return int(self._write_row(keys=self.keys(job_id), args=args))

    def mark_running(self, job_id: str) -> str | None:
        return self._cas(job_id, "queued", "running")

    def cancel(self, job_id: str) -> str | None:
        """The job's status after the call (cancelled unless it had already ended); None: gone."""
        return self._cas(job_id, "*", "cancelled")

    def fail(self, job_id: str) -> str | None:
        return self._cas(job_id, "*", "failed")

    def finish_if_complete(self, job_id: str) -> str | None:
        value = self._finish(keys=self.keys(job_id), args=[self.ttl_s, repr(time.time())])
        return value.decode() if value is not None else None

    def retry_failed(self, job_id: str, deadline_s: float) -> tuple[str, int, list[int]] | None:
        """Queues again the failed (or never run) rows of a job that ended with some: (status
        after the call, rows queued, chunks to send). A job in any other state, or retried
        already, is left as it is (0 rows, no chunks), so a repeated call queues nothing.
        The job's rows wait for decoders `deadline_s` from now. None: the job is gone."""
        now = time.time()
        keys = [*self.keys(job_id), queued_key(self.namespace)]
        args = [repr(now), self.ttl_s, repr(now + deadline_s), job_id]
        value = self._retry_failed(keys=keys, args=args)
        if value is None:
            return None
        status, rows, *chunks = value
        return status.decode(), int(rows), sorted(int(c) for c in chunks)

    def iter_results(self, job_id: str, total: int, batch: int = 512) -> Iterator[bytes]:
        """Result lines in input order; rows not written yet are skipped."""
        results_key = self.keys(job_id)[1]
        for start in range(0, total, batch):
            fields = [str(i) for i in range(start, min(total, start + batch))]
            for line in self.client.hmget(results_key, fields):
                if line is not None:
                    yield line + b"\n"

    def _cas(self, job_id: str, expected: str, new: str) -> str | None:
        value = self._transition(
            keys=self.keys(job_id), args=[expected, new, self.ttl_s, repr(time.time())]
        )
        return value.decode() if value is not None else None

    @staticmethod
    def _record(fields: dict[str, Any], done: int, failed: int, ttl: int | None) -> JobRecord:
        return JobRecord(
            id=str(fields["id"]),
            status=str(fields["status"]),
            total=int(fields["total"]),
            done=int(done),
            failed=int(failed),
            chunk_size=int(fields["chunk_size"]),
            num_chunks=int(fields["num_chunks"]),
            catalog=str(fields["catalog"]) or None,
            created_at=float(fields["created_at"]),
            updated_at=float(fields["updated_at"]),
            expires_in_s=ttl,
            owner=str(fields.get("owner", "")),
            deadline_at=float(fields["deadline_at"]) if fields.get("deadline_at") else None,
            retries=int(fields.get("retries", 0)),
        )
