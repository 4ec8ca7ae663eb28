"""One batch job of the batch-fault tests, run through the batch API (`make_client`) while the
test breaks something: submitted by `running_job(settings)`, its rows watched in the job store
as a worker writes them, its end awaited, and the check that it succeeded with every row
exactly once."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from tests.services.gateway.batch.conftest import Worker, make_client, store_of, wait_for
from tests.services.gateway.batch.test_worker_e2e import (
    assert_complete,
    finished,
    result_rows,
    status,
    submit,
)
from widebeam.services.gateway.batch.job_store import JobStore
from widebeam.services.gateway.batch.settings import BatchSettings

ROWS = 200  # a job's rows: 20 chunks of batch_settings' 10


@dataclass(frozen=True)
class RunningJob:
    client: TestClient
    store: JobStore
    id: str
    rows: int

    @property
    def results_key(self) -> str:
        return self.store.keys(self.id)[1]

    def written_count(self) -> int:
        return int(self.store.client.hlen(self.results_key))

    def written(self) -> set[int]:
        return {int(k) for k in self.store.client.hkeys(self.results_key)}

    def wait_inside_a_chunk(self, chunk_size: int, after_chunks: int = 3) -> None:
        """Waits until at least `after_chunks` chunks are written and the worker is inside the
        next one, half of it or more still to write. Chunks run in queue order, one at a time:
        a row count a few rows past a chunk boundary means the worker is inside a chunk."""

        def inside_a_chunk() -> bool:
            done = self.written_count()
            return done >= after_chunks * chunk_size and 1 <= done % chunk_size <= chunk_size // 2

        wait_for(inside_a_chunk, 60, "the worker to be inside a chunk", step=0.002)

    def status(self) -> dict[str, Any]:
        """The job as the batch API shows it (status, done, failed, ...)."""
        return status(self.client, self.id)

    def finished(self) -> dict[str, Any] | None:
        """The job's status once it no longer runs, else None."""
        return finished(self.client, self.id)

    def wait_finished(
        self, timeout: float = 120, what: str = "the job to finish"
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The job's status once it no longer runs, and its result rows."""
        job: dict[str, Any] = wait_for(self.finished, timeout, what, step=0.1)
        return job, result_rows(self.client, self.id)

    def assert_every_row_once(self, job: dict[str, Any], rows: list[dict[str, Any]]) -> None:
        """The job succeeded; each row was written and returned exactly once, in order."""
        assert (job["status"], job["done"], job["failed"]) == ("succeeded", self.rows, 0)
        assert len(rows) == self.rows and self.written_count() == self.rows
        assert_complete(rows, self.rows)


@contextmanager
def ready_worker(settings: BatchSettings, log_path: Path) -> Iterator[Worker]:
    """A `widebeam worker` (log at `log_path`) ready before the block starts and stopped
    however it ends."""
    worker = Worker(settings, log_path)
    try:
        yield worker.wait_ready()
    finally:
        worker.stop()


def survivor_log(worker: Worker, fault: str) -> str:
    """The log of a worker that must have lived through `fault` (it fails the test if not)."""
    assert worker.proc.poll() is None, f"the worker died with {fault}"
    return worker.log_path.read_text(errors="replace")


@contextmanager
def running_job(settings: BatchSettings, rows: int = ROWS) -> Iterator[RunningJob]:
    """A job of `rows` rows submitted through a batch API client that lives for the block."""
    with make_client(settings) as client:
        yield RunningJob(client, store_of(settings), submit(client, rows), rows)
