"""Real processes: redis-server, a decoder on a free port, `python -m widebeam worker`
subprocesses, and the router in front: complete jobs, SIGKILLed workers, cancellation."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.services.gateway.batch.conftest import (
    AUTH,
    Worker,
    batch_settings,
    make_client,
    store_of,
    wait_for,
)
from widebeam.services.decoder.server.background import BackgroundServer
from widebeam.services.gateway.batch.settings import BatchSettings

TOTAL = 200
StartWorker = Callable[[BatchSettings], Worker]


def requests(count: int) -> list[dict[str, Any]]:
    # Distinct histories so rows are told apart by their results, not only by their index.
    return [
        {"user_id": f"user-{i}", "history": [f"item-{i % 300}", f"item-{(7 * i) % 300}"], "n": 4}
        for i in range(count)
    ]


@pytest.fixture
def settings(redis_url: str, decoder: BackgroundServer) -> BatchSettings:
    return batch_settings(redis_url, decoder.address)


@pytest.fixture
def client(settings: BatchSettings) -> Iterator[TestClient]:
    with make_client(settings) as c:
        yield c


def submit(client: TestClient, count: int) -> str:
    response = client.post("/v1/batch-jobs", json={"requests": requests(count)}, headers=AUTH)
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def status(client: TestClient, job_id: str) -> dict[str, Any]:
    return dict(client.get(f"/v1/batch-jobs/{job_id}", headers=AUTH).json())


def finished(client: TestClient, job_id: str) -> dict[str, Any] | None:
    job = status(client, job_id)
    return job if job["status"] not in ("queued", "running") else None


def result_rows(client: TestClient, job_id: str) -> list[dict[str, Any]]:
    response = client.get(f"/v1/batch-jobs/{job_id}/results", headers=AUTH)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/x-ndjson")
    return [json.loads(line) for line in response.text.splitlines()]


def assert_complete(rows: list[dict[str, Any]], count: int) -> None:
    assert [row["row"] for row in rows] == list(range(count))
    assert [row["user_id"] for row in rows] == [f"user-{i}" for i in range(count)]
    assert all("error" not in row and len(row["items"]) == 4 for row in rows)


def test_a_200_row_job_completes_in_input_order(
    client: TestClient, settings: BatchSettings, start_worker: StartWorker
) -> None:
    start_worker(settings)
    job_id = submit(client, TOTAL)
    job = wait_for(lambda: finished(client, job_id), 60, "the job to finish", step=0.1)
    assert (job["status"], job["done"], job["failed"], job["total"]) == ("succeeded", 200, 0, 200)
    assert_complete(result_rows(client, job_id), TOTAL)
    store = store_of(settings)
    ttls = [store.client.ttl(key) for key in store.keys(job_id)]  # -2: no failed rows, no set
    assert ttls[2] == -2 and all(0 < t <= settings.result_ttl_s for t in ttls[:2] + ttls[3:]), ttls


def test_a_worker_killed_mid_chunk_loses_and_duplicates_nothing(
    client: TestClient, settings: BatchSettings, start_worker: StartWorker
) -> None:
    first = start_worker(settings)
    job_id = submit(client, TOTAL)
    store = store_of(settings)
    results_key = store.keys(job_id)[1]
    size = settings.chunk_size

    # Chunks run in queue order, one at a time: a row count a few rows past a chunk boundary
    # means the worker is inside a chunk, with several rows of it still to go.
    def inside_a_chunk() -> bool:
        done = int(store.client.hlen(results_key))
        return done >= 3 * size and 1 <= done % size <= size // 2

    wait_for(inside_a_chunk, 60, "the worker to be inside a chunk", step=0.002)
    first.kill(signal.SIGKILL)
    written = {int(k) for k in store.client.hkeys(results_key)}
    partial = [
        c
        for c in range(TOTAL // size)
        if 0 < len(written & set(range(c * size, (c + 1) * size))) < size
    ]
    assert partial, f"the kill did not land inside a chunk ({len(written)} rows written)"
    assert status(client, job_id)["status"] == "running"

    start_worker(settings)  # the killed chunk comes back after the visibility timeout
    job = wait_for(lambda: finished(client, job_id), 60, "the job to finish", step=0.1)
    assert (job["status"], job["done"], job["failed"]) == ("succeeded", TOTAL, 0)
    rows = result_rows(client, job_id)
    assert len(rows) == TOTAL and store.client.hlen(results_key) == TOTAL
    assert_complete(rows, TOTAL)


def test_cancel_stops_a_running_job(
    client: TestClient, settings: BatchSettings, start_worker: StartWorker
) -> None:
    start_worker(settings)
    job_id = submit(client, TOTAL)
    wait_for(lambda: status(client, job_id)["done"] > 0, 60, "the job to start")
    response = client.delete(f"/v1/batch-jobs/{job_id}", headers=AUTH)
    assert response.status_code == 200 and response.json()["status"] == "cancelled"
    store = store_of(settings)
    queue_drained = lambda: store.client.llen(settings.queue) == 0  # noqa: E731
    wait_for(queue_drained, 30, "the remaining chunks to be skipped", step=0.05)
    done_at_drain = status(client, job_id)["done"]
    job = status(client, job_id)
    assert job["status"] == "cancelled" and job["done"] < TOTAL
    rows = result_rows(client, job_id)
    assert len(rows) == done_at_drain and [r["row"] for r in rows] == sorted(r["row"] for r in rows)
    # A cancelled job stays cancelled; DELETE again is harmless.
    assert client.delete(f"/v1/batch-jobs/{job_id}", headers=AUTH).json()["status"] == "cancelled"
