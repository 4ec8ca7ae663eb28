"""The Redis job store: idempotent row writes, derived counters, status compare-and-set, TTLs,
terminal states with failed rows and their retry."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import redis

from widebeam.services.gateway.batch.chunk_leases import queued_key
from widebeam.services.gateway.batch.job_store import JobStore

ROWS = [{"history": [f"item-{i}"], "n": 2} for i in range(7)]


def make_store(client: redis.Redis, ttl_s: int = 600) -> JobStore:
    return JobStore(client, "test:batch", ttl_s)


def result(row: int) -> dict[str, Any]:
    return {"items": [{"item_id": f"item-{row}", "score": -1.0, "sid": [1, 2, 3]}]}


def test_rows_are_stored_by_chunk(redis_client: redis.Redis) -> None:
    store = make_store(redis_client)
    job = store.create(ROWS, chunk_size=3, catalog="books")
    assert (job.status, job.total, job.num_chunks, job.catalog) == ("queued", 7, 3, "books")
    assert store.chunk_rows(job.id, 0) == (0, ROWS[:3])
    assert store.chunk_rows(job.id, 2) == (6, ROWS[6:])
    assert store.chunk_rows(job.id, 3) is None and store.chunk_rows("nope", 0) is None


def test_a_row_is_written_once_and_counted_once(redis_client: redis.Redis) -> None:
    store = make_store(redis_client)
    job = store.create(ROWS, chunk_size=3, catalog=None)
    assert store.write_row(job.id, 1, {"error": {"message": "x"}}, is_error=True) == 1
    # A redelivered chunk writes the same rows again: the first write stands, nothing doubles.
    assert store.write_row(job.id, 1, result(1), is_error=False) == 0
    assert store.write_row(job.id, 1, {"error": {"message": "y"}}, is_error=True) == 0
    assert store.write_row(job.id, 4, result(4), is_error=False) == 1
    assert store.write_row(job.id, 4, result(4), is_error=False) == 0
    got = store.get(job.id)
    assert got is not None and (got.done, got.failed) == (2, 1)
    assert store.present(job.id, range(7)) == {1, 4}
    lines = [json.loads(line) for line in store.iter_results(job.id, 7)]
    assert [line["row"] for line in lines] == [1, 4] and lines[0]["error"]["message"] == "x"


def test_finish_cancel_and_fail_are_compare_and_set(redis_client: redis.Redis) -> None:
    store = make_store(redis_client)
    job = store.create(ROWS[:2], chunk_size=1, catalog=None)
    assert store.mark_running(job.id) == "running" and store.mark_running(job.id) == "running"
    store.write_row(job.id, 0, result(0), is_error=False)
    assert store.finish_if_complete(job.id) == "running"
    store.write_row(job.id, 1, result(1), is_error=False)
    assert store.finish_if_complete(job.id) == "succeeded"
    assert store.cancel(job.id) == "succeeded"  # an ended job stays as it ended
    other = store.create(ROWS[:2], chunk_size=1, catalog=None)
    assert store.cancel(other.id) == "cancelled"
    assert store.mark_running(other.id) == "cancelled"
    store.write_row(other.id, 0, result(0), is_error=False)
    store.write_row(other.id, 1, result(1), is_error=False)
    assert store.finish_if_complete(other.id) == "cancelled"
    assert store.cancel("missing") is None and store.get("missing") is None


def test_a_job_whose_rows_all_failed_is_failed(redis_client: redis.Redis) -> None:
    store = make_store(redis_client)
    job = store.create(ROWS[:2], chunk_size=2, catalog=None)
    for row in (0, 1):
        store.write_row(job.id, row, {"error": {"message": "no"}}, is_error=True)
    assert store.finish_if_complete(job.id) == "failed"


def test_every_key_expires_and_the_job_is_gone_after_the_ttl(redis_client: redis.Redis) -> None:
    store = make_store(redis_client, ttl_s=600)
    job = store.create(ROWS, chunk_size=3, catalog=None)
    store.write_row(job.id, 0, {"error": {"message": "x"}}, is_error=True)
    for key in store.keys(job.id):
        assert 0 < redis_client.ttl(key) <= 600, key
    short = make_store(redis_client, ttl_s=1)
    brief = short.create(ROWS, chunk_size=3, catalog=None)
    short.write_row(brief.id, 0, result(0), is_error=False)
    time.sleep(1.2)
    assert short.get(brief.id) is None
    assert not any(redis_client.exists(key) for key in short.keys(brief.id))
    # A late chunk of an expired job must not resurrect its keys.
    assert short.write_row(brief.id, 1, result(1), is_error=False) == -1
    assert not any(redis_client.exists(key) for key in short.keys(brief.id))


def test_some_failed_rows_end_completed_with_errors_and_are_retried_once(
    redis_client: redis.Redis,
) -> None:
    store = make_store(redis_client)
    job = store.create(ROWS, chunk_size=3, catalog=None, deadline_s=5)
    for row in range(7):
        failed = row in (1, 6)
        store.write_row(job.id, row, {"error": {"message": "x"}} if failed else result(row), failed)
    assert store.finish_if_complete(job.id) == "completed_with_errors"
    record = store.get(job.id)
    assert record is not None and (record.done, record.failed, record.retries) == (7, 2, 0)
    deadline = record.deadline_at
    assert deadline is not None and deadline == pytest.approx(record.created_at + 5)
    # Rows 1 and 6 (chunks 0 and 2) forget their errors; the rest is kept.
    assert store.retry_failed(job.id, deadline_s=60) == ("queued", 2, [0, 2])
    again = store.get(job.id)
    assert again is not None and (again.status, again.done, again.failed, again.retries) == (
        "queued", 5, 0, 1,
    )  # fmt: skip
    assert again.deadline_at is not None and again.deadline_at > deadline
    assert store.present(job.id, range(7)) == {0, 2, 3, 4, 5}
    queued = redis_client.zrange(queued_key(store.namespace), 0, -1)
    assert {f"{job.id}:0".encode(), f"{job.id}:2".encode()} <= set(queued)
    # Nothing more to retry: a second call changes nothing.
    assert store.retry_failed(job.id, deadline_s=60) == ("queued", 0, [])
    assert store.retry_failed("missing", deadline_s=60) is None


def test_a_job_that_never_ran_retries_every_row(redis_client: redis.Redis) -> None:
    store = make_store(redis_client)
    job = store.create(ROWS, chunk_size=3, catalog=None)
    assert store.fail(job.id) == "failed"  # as when enqueueing its chunks failed
    assert store.retry_failed(job.id, deadline_s=60) == ("queued", 7, [0, 1, 2])
    cancelled = store.create(ROWS, chunk_size=3, catalog=None)
    store.cancel(cancelled.id)
    assert store.retry_failed(cancelled.id, deadline_s=60) == ("cancelled", 0, [])
