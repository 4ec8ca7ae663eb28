"""Faults in batch jobs: the `widebeam worker` SIGKILLed mid-chunk twice in one job,
redis-server restarted three times while a job runs, and Redis away longer than the worker's
retry budget. The job completes with exactly the expected rows: none lost, none duplicated."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.reliability.batch_job import ROWS, ready_worker, running_job, survivor_log
from tests.reliability.faults_support import restart_keeping_data
from tests.reliability.support import GatewayApp
from tests.services.gateway.batch.conftest import Worker, batch_settings, wait_for
from tests.services.gateway.batch.test_worker_e2e import assert_complete, requests
from tests.services.gateway.support import gateway_settings
from tests.support.redis_server import RedisServer
from widebeam.services.decoder.server.background import BackgroundServer

pytestmark = pytest.mark.slow


def test_a_worker_killed_mid_chunk_twice_loses_and_duplicates_nothing(
    own_redis: RedisServer, rel_decoder: BackgroundServer, tmp_path: Path
) -> None:
    settings = batch_settings(own_redis.url, rel_decoder.address)
    size = settings.chunk_size
    workers: list[Worker] = []
    try:
        workers.append(Worker(settings, tmp_path / "worker-0.log").wait_ready())
        began = time.monotonic()
        with running_job(settings) as job_run:
            partial_chunks: list[int] = []

            def new_partial() -> list[int]:
                # Chunks with some but not half their rows written, other than the one killed
                # before (it stays partial until redelivered): the worker is inside one.
                written = job_run.written()
                return [
                    c for c in range(ROWS // size)
                    if c not in partial_chunks
                    and 1 <= len(written & set(range(c * size, (c + 1) * size))) <= size // 2
                ]  # fmt: skip

            for kill, past in enumerate((3 * size, 8 * size)):
                wait_for(
                    lambda past=past: job_run.written_count() >= past and new_partial(),
                    90, f"kill {kill + 1} to land in a chunk", step=0.002,
                )  # fmt: skip
                workers[-1].kill(signal.SIGKILL)
                partial = new_partial()
                assert partial, f"kill {kill + 1} did not land inside a chunk"
                partial_chunks += partial
                log = tmp_path / f"worker-{kill + 1}.log"
                workers.append(Worker(settings, log).wait_ready())
            job, rows = job_run.wait_finished(90)
            elapsed = time.monotonic() - began
    finally:
        for worker in workers:
            worker.stop()
    print(
        f"\nworker kill x2: rows {ROWS}, partial chunks at the kills {partial_chunks}, "
        f"status {job['status']}, done {job['done']}, failed {job['failed']}, "
        f"rows returned {len(rows)}, distinct {len({r['row'] for r in rows})}, "
        f"job time {elapsed:.1f} s"
    )
    job_run.assert_every_row_once(job, rows)


# Rows done before each restart: three restarts per job, each at a different point of a chunk,
# so a reconnect path that loses a chunk now and then (as one did: see docs/reliability.md)
# fails here rather than once in ten runs.
RESTART_AT = (40, 100, 150)


def test_redis_restarted_during_a_job_every_service_reconnects(
    own_redis: RedisServer, rel_decoder: BackgroundServer, tmp_path: Path
) -> None:
    settings = batch_settings(own_redis.url, rel_decoder.address)
    downs: list[float] = []
    gateway_back: list[float] = []
    worker_back: list[float] = []
    with ready_worker(settings, tmp_path / "worker.log") as worker:
        gw_settings = gateway_settings([rel_decoder.address], redis_url=own_redis.url)
        with (
            GatewayApp(gw_settings) as gateway,
            httpx.Client(base_url=gateway.url, timeout=30) as http,
        ):
            submitted = http.post("/v1/batch-jobs", json={"requests": requests(ROWS)})
            assert submitted.status_code == 202, submitted.text
            job_id = submitted.json()["id"]

            for at in RESTART_AT:
                wait_for(
                    lambda at=at: (progress_or_none(http, job_id) or 0) >= at,
                    60, f"{at} rows done", step=0.02,
                )  # fmt: skip
                downs.append(restart_keeping_data(own_redis))
                restarted = time.monotonic()
                # The gateway reads the job store again ...
                seen: int = wait_for(
                    lambda: (n,) if (n := progress_or_none(http, job_id)) is not None else None,
                    30, "the gateway to read the job again", step=0.01,
                )[0]  # fmt: skip
                gateway_back.append(time.monotonic() - restarted)
                # ... and the worker writes rows again (counted from the gateway's first read).
                wait_for(
                    lambda seen=seen: (progress_or_none(http, job_id) or 0) > seen or seen == ROWS,
                    30, "the worker to write rows again", step=0.01,
                )  # fmt: skip
                worker_back.append(time.monotonic() - restarted)

            def done() -> dict[str, Any] | None:
                job = http.get(f"/v1/batch-jobs/{job_id}").json()
                return job if job["status"] not in ("queued", "running") else None

            try:
                job = wait_for(done, 40, "the job to finish", step=0.1)
            except AssertionError:
                print(http.get(f"/v1/batch-jobs/{job_id}").json(), worker.log()[-3000:])
                raise
            results = http.get(f"/v1/batch-jobs/{job_id}/results")
            assert results.status_code == 200, results.text
            rows = [httpx.Response(200, content=line).json() for line in results.text.splitlines()]
        log = survivor_log(worker, "Redis")
    print(
        f"\nredis restart x{len(RESTART_AT)} mid-job: rows {ROWS}, redis down "
        f"{max(downs):.2f} s at most, gateway reads again {max(gateway_back):.2f} s and the "
        f"worker writes again {max(worker_back):.2f} s after a restart (at most), chunks "
        f"requeued {log.count('requeued')}, status {job['status']}, done {job['done']}, failed "
        f"{job['failed']}, rows returned {len(rows)}, distinct {len({r['row'] for r in rows})}"
    )
    assert (job["status"], job["done"], job["failed"]) == ("succeeded", ROWS, 0)
    assert_complete(rows, ROWS)
    assert "raised unexpected" not in log, "a chunk task failed on the restart"


def test_redis_down_longer_than_the_retry_budget_hands_the_chunk_back(
    own_redis: RedisServer,
    rel_decoder: BackgroundServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Redis away for 2 s, the worker's job store retrying for 0.2 s: the running chunk meets a
    Redis error it cannot ride out. It must go back to the queue (redelivered after the
    visibility timeout), not fail: a failed task is acknowledged, and its rows would be lost."""
    monkeypatch.setenv("WIDEBEAM_BATCH_REDIS_RETRY_S", "0.2")  # read by the worker process
    settings = batch_settings(own_redis.url, rel_decoder.address)
    with ready_worker(settings, tmp_path / "worker.log") as worker:
        began = time.monotonic()
        with running_job(settings) as job_run:
            job_run.wait_inside_a_chunk(settings.chunk_size, after_chunks=4)
            down_s = restart_keeping_data(own_redis, down_s=2.0)
            job, rows = job_run.wait_finished(60)
            elapsed = time.monotonic() - began
        log = survivor_log(worker, "Redis")
    print(
        f"\nredis down {down_s:.1f} s mid-job (worker retry budget 0.2 s): rows {ROWS}, chunks "
        f"handed back {log.count('requeued')}, status {job['status']}, done {job['done']}, "
        f"failed {job['failed']}, rows returned {len(rows)}, job time {elapsed:.1f} s"
    )
    assert log.count("requeued") >= 1, "the outage did not reach a running chunk"
    assert "raised unexpected" not in log, "a chunk task failed on the outage"
    job_run.assert_every_row_once(job, rows)


def progress_or_none(http: httpx.Client, job_id: str) -> int | None:
    """`done` of the job, or None while the gateway cannot reach Redis yet (a 503)."""
    try:
        response = http.get(f"/v1/batch-jobs/{job_id}")
    except httpx.HTTPError:
        return None
    return int(response.json()["done"]) if response.status_code == 200 else None
