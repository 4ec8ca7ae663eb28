"""Faults in batch jobs: the only `widebeam worker` SIGKILLed mid-chunk, with the broker's
visibility timeout far longer than the test may take. The chunk comes back through its lease:
the restarted worker's watchdog finds the lease ran out and sends the chunk again, and the new
run decodes only the rows the killed one had not written."""

from __future__ import annotations

import ast
import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.reliability.batch_job import ROWS, running_job
from tests.services.gateway.batch.conftest import Worker, batch_settings, wait_for
from tests.support.redis_server import RedisServer
from widebeam.services.decoder.server.background import BackgroundServer

pytestmark = pytest.mark.slow

# Far past the hang guards below: a chunk that waited for the broker's redelivery would fail.
VISIBILITY_S = 900
SUMMARY = re.compile(r"succeeded in [0-9.]+s: (\{.*\})")


def run_summaries(log: str) -> list[dict[str, Any]]:
    """The summaries of the chunk runs in a worker's log (Celery's `... succeeded in` lines)."""
    return [ast.literal_eval(m.group(1)) for m in SUMMARY.finditer(log)]


def test_a_killed_workers_chunk_resumes_through_its_lease(
    own_redis: RedisServer, rel_decoder: BackgroundServer, tmp_path: Path
) -> None:
    settings = batch_settings(
        own_redis.url, rel_decoder.address, visibility_timeout_s=VISIBILITY_S, lease_s=2
    )
    size = settings.chunk_size
    first = Worker(settings, tmp_path / "worker-0.log")
    second: Worker | None = None
    try:
        first.wait_ready()
        with running_job(settings) as job_run:
            job_run.wait_inside_a_chunk(size)
            first.kill(signal.SIGKILL)
            killed_at = time.monotonic()
            written = job_run.written()
            partial = [
                c for c in range(ROWS // size)
                if 0 < len(written & set(range(c * size, (c + 1) * size))) < size
            ]  # fmt: skip
            assert len(partial) == 1, f"the kill did not land inside one chunk: {partial}"
            chunk = partial[0]
            kept = len(written & set(range(chunk * size, (chunk + 1) * size)))

            second = Worker(settings, tmp_path / "worker-1.log").wait_ready()
            chunk_rows = set(range(chunk * size, (chunk + 1) * size))
            wait_for(
                lambda: chunk_rows <= job_run.written(),
                120, "the killed chunk to be resumed", step=0.05,
            )  # fmt: skip
            resumed_s = time.monotonic() - killed_at
            job, rows = job_run.wait_finished()
        log = second.log_path.read_text(errors="replace")
    finally:
        first.stop()
        if second is not None:
            second.stop()
    runs = [run for run in run_summaries(log) if run["chunk"] == chunk]
    sent = sum(run["sent"] - run["refused"] for run in runs)
    print(
        f"\nworker kill -9 mid-chunk (visibility timeout {VISIBILITY_S} s, lease 2 s): chunk "
        f"{chunk} had {kept}/{size} rows written, resumed {resumed_s:.1f} s after the kill "
        f"(worker restart included), rows sent again {sent}, status {job['status']}, "
        f"done {job['done']}, failed {job['failed']}"
    )
    assert f"chunk {chunk}: nobody is running it; sent again" in log
    assert sent == size - kept, runs  # the rows written before the kill were not redone
    job_run.assert_every_row_once(job, rows)
