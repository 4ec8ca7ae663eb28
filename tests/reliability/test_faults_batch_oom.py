"""Faults in batch jobs: Redis out of memory (`maxmemory` below what it holds, policy
`noeviction`) while a job runs. Every write is refused with an OOM error (a `ResponseError`, not
a connection error) for longer than the worker's per-command retry budget; once memory is back
the job completes with every row exactly once."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.services.gateway.batch.conftest import (
    Worker,
    batch_settings,
    make_client,
    store_of,
    wait_for,
)
from tests.services.gateway.batch.test_worker_e2e import (
    assert_complete,
    finished,
    result_rows,
    submit,
)
from tests.support.redis_server import RedisServer
from widebeam.services.decoder.server.background import BackgroundServer

pytestmark = pytest.mark.slow

TOTAL = 200
# OOM errors the worker must have met (and ridden out) before memory comes back: enough for
# several row writes and the chunk's own hand-back to have been refused.
OOM_REPLIES = 60


def oom_replies(client: redis.Redis) -> int:
    return int(client.info("errorstats").get("errorstat_OOM", {}).get("count", 0))


def test_redis_out_of_memory_during_a_job_loses_no_row(
    own_redis: RedisServer,
    rel_decoder: BackgroundServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Past the worker's 0.3 s of per-command retries the chunk itself meets the OOM errors.
    monkeypatch.setenv("WIDEBEAM_BATCH_REDIS_RETRY_S", "0.3")  # read by the worker process
    settings = batch_settings(own_redis.url, rel_decoder.address)
    store = store_of(settings)
    admin = redis.Redis.from_url(own_redis.url)
    admin.config_set("maxmemory-policy", "noeviction")
    worker = Worker(settings, tmp_path / "worker.log")
    try:
        worker.wait_ready()
        with make_client(settings) as client:
            job_id = submit(client, TOTAL)
            results_key = store.keys(job_id)[1]
            size = settings.chunk_size

            def inside_a_chunk() -> bool:
                done = int(store.client.hlen(results_key))
                return done >= 3 * size and 1 <= done % size <= size // 2

            wait_for(inside_a_chunk, 60, "the worker to be inside a chunk", step=0.002)
            written_at_oom = int(store.client.hlen(results_key))
            admin.config_set("maxmemory", 1)  # below what Redis holds: every write is refused
            oom_began = time.monotonic()
            try:
                wait_for(lambda: oom_replies(admin) >= OOM_REPLIES, 30, "OOM errors", step=0.05)
            finally:
                admin.config_set("maxmemory", 0)
            oom_s = time.monotonic() - oom_began
            refused = oom_replies(admin)
            job: dict[str, Any] = wait_for(
                lambda: finished(client, job_id), 120, "the job to finish", step=0.1
            )
            rows = result_rows(client, job_id)
        assert worker.proc.poll() is None, "the worker died with the OOM"
        log = worker.log_path.read_text(errors="replace")
    finally:
        worker.stop()
        admin.close()
    print(
        f"\nredis OOM {oom_s:.1f} s mid-job ({written_at_oom} rows written before it, "
        f"{refused} writes refused, worker retry budget 0.3 s): rows {TOTAL}, status "
        f"{job['status']}, done {job['done']}, failed {job['failed']}, rows returned {len(rows)}"
    )
    assert "raised unexpected" not in log, "a chunk task failed on the OOM"
    assert (job["status"], job["done"], job["failed"]) == ("succeeded", TOTAL, 0)
    assert len(rows) == TOTAL and store.client.hlen(results_key) == TOTAL
    assert_complete(rows, TOTAL)
