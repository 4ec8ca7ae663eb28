"""Faults in batch jobs: Redis out of memory (`maxmemory` below what it holds, policy
`noeviction`) while a job runs. Every write is refused with an OOM error (a `ResponseError`, not
a connection error) for longer than the worker's per-command retry budget; once memory is back
the job completes with every row exactly once."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis

from tests.reliability.batch_job import ROWS, ready_worker, running_job, survivor_log
from tests.services.gateway.batch.conftest import batch_settings, wait_for
from tests.support.redis_server import RedisServer
from widebeam.services.decoder.server.background import BackgroundServer

pytestmark = pytest.mark.slow

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
    with redis.Redis.from_url(own_redis.url) as admin:
        admin.config_set("maxmemory-policy", "noeviction")
        with ready_worker(settings, tmp_path / "worker.log") as worker:
            with running_job(settings) as job_run:
                job_run.wait_inside_a_chunk(settings.chunk_size)
                written_at_oom = job_run.written_count()
                admin.config_set("maxmemory", 1)  # below what Redis holds: every write is refused
                oom_began = time.monotonic()
                try:
                    wait_for(lambda: oom_replies(admin) >= OOM_REPLIES, 30, "OOM errors", step=0.05)
                finally:
                    admin.config_set("maxmemory", 0)
                oom_s = time.monotonic() - oom_began
                refused = oom_replies(admin)
                job, rows = job_run.wait_finished()
            log = survivor_log(worker, "the OOM")
    print(
        f"\nredis OOM {oom_s:.1f} s mid-job ({written_at_oom} rows written before it, "
        f"{refused} writes refused, worker retry budget 0.3 s): rows {ROWS}, status "
        f"{job['status']}, done {job['done']}, failed {job['failed']}, rows returned {len(rows)}"
    )
    assert "raised unexpected" not in log, "a chunk task failed on the OOM"
    job_run.assert_every_row_once(job, rows)
