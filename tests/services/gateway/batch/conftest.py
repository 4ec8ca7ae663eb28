"""Batch-job fixtures: a real decoder (tiny SID model), per-module Redis databases, Celery
worker subprocesses (`python -m widebeam worker`) and a tiny FastAPI app with the router."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import Depends, FastAPI, Header, HTTPException
from fastapi.testclient import TestClient

from tests.services.decoder.conftest import SidModel, sid_model  # noqa: F401 (fixture)
from tests.services.decoder.server.conftest import make_settings
from tests.services.gateway import support
from widebeam.services.decoder.server.background import BackgroundServer
from widebeam.services.gateway.batch.job_store import JobStore
from widebeam.services.gateway.batch.router import create_batch_router
from widebeam.services.gateway.batch.schemas import RowLimits
from widebeam.services.gateway.batch.settings import BatchSettings
from widebeam.services.gateway.settings import GatewaySettings

API_KEY = "test-key"
AUTH = {"Authorization": f"Bearer {API_KEY}"}
REPO = Path(__file__).resolve().parents[4]


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, step: float = 0.02) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(step)


def batch_settings(redis_url: str, decoder: str, **overrides: Any) -> BatchSettings:
    # Small chunks, short leases and a short visibility timeout, so a lost chunk comes back
    # within seconds.
    fields: dict[str, Any] = {
        "redis_url": redis_url,
        "decoder_addresses": [decoder],
        "chunk_size": 10,
        "rows_in_flight": 2,
        "row_budget_s": 0.5,
        "rpc_timeout_s": 0.5,
        "visibility_timeout_s": 6,
        "restore_interval_s": 1,
        "lease_s": 3,
        "watchdog_interval_s": 0.5,
        "lost_chunk_grace_s": 3,
        "retry_delay_s": 0.2,
        "retry_delay_max_s": 1,
        "result_ttl_s": 600,
    }
    return BatchSettings(**(fields | overrides))


def gateway_settings() -> GatewaySettings:
    return GatewaySettings(max_beam_width=64, max_n=32, max_history=50, default_beam_width=16)


def require_api_key(authorization: str | None = Header(None)) -> None:
    if authorization != f"Bearer {API_KEY}":
        raise HTTPException(401, "bad API key")


def make_client(settings: BatchSettings) -> TestClient:
    """The routes behind this module's one key; jobs have no owner (as without API keys)."""
    app = FastAPI()
    router = create_batch_router(settings, RowLimits.from_settings(gateway_settings()))
    app.include_router(router, dependencies=[Depends(require_api_key)])
    return TestClient(app)


def store_of(settings: BatchSettings) -> JobStore:
    return JobStore.from_url(settings.redis_url, settings.namespace, settings.result_ttl_s)


class Worker:
    """`python -m widebeam worker` in its own session (so a kill takes its whole group)."""

    def __init__(self, settings: BatchSettings, log_path: Path) -> None:
        env = os.environ | {
            "PYTHONPATH": str(REPO),
            "WIDEBEAM_BATCH_CHUNK_SIZE": str(settings.chunk_size),
            "WIDEBEAM_BATCH_ROW_BUDGET_S": str(settings.row_budget_s),
            "WIDEBEAM_BATCH_RPC_TIMEOUT_S": str(settings.rpc_timeout_s),
            "WIDEBEAM_BATCH_VISIBILITY_TIMEOUT_S": str(settings.visibility_timeout_s),
            "WIDEBEAM_BATCH_RESTORE_INTERVAL_S": str(settings.restore_interval_s),
            "WIDEBEAM_BATCH_RETRY_DELAY_S": str(settings.retry_delay_s),
            "WIDEBEAM_BATCH_RETRY_DELAY_MAX_S": str(settings.retry_delay_max_s),
            "WIDEBEAM_BATCH_JOB_DEADLINE_S": str(settings.job_deadline_s),
            "WIDEBEAM_BATCH_LEASE_S": str(settings.lease_s),
            "WIDEBEAM_BATCH_WATCHDOG_INTERVAL_S": str(settings.watchdog_interval_s),
            "WIDEBEAM_BATCH_LOST_CHUNK_GRACE_S": str(settings.lost_chunk_grace_s),
            "WIDEBEAM_BATCH_RESULT_TTL_S": str(settings.result_ttl_s),
            "WIDEBEAM_BATCH_ROWS_IN_FLIGHT": str(settings.rows_in_flight),
        }
        cmd = [sys.executable, "-m", "widebeam", "worker", "--redis-url", settings.redis_url]
        cmd += ["--decoder", ",".join(settings.decoder_addresses), "--loglevel", "INFO"]
        self.log_path = log_path
        self._log = log_path.open("ab")
        self.proc = subprocess.Popen(
            cmd, env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )

    def wait_ready(self, timeout: float = 60.0) -> Worker:
        def ready() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"worker exited:\n{self.log()}")
            return b" ready." in self.log_path.read_bytes()

        wait_for(ready, timeout, "the worker to be ready", step=0.05)
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()
        self._log.close()


@pytest.fixture(scope="module")
def decoder(sid_model: SidModel) -> Iterator[BackgroundServer]:  # noqa: F811
    with BackgroundServer(make_settings(sid_model)) as srv:
        yield srv


@pytest.fixture
def start_worker(tmp_path: Path) -> Iterator[Callable[[BatchSettings], Worker]]:
    workers: list[Worker] = []

    def start(settings: BatchSettings) -> Worker:
        workers.append(Worker(settings, tmp_path / f"worker-{len(workers)}.log"))
        return workers[-1].wait_ready()

    yield start
    for worker in workers:
        worker.stop()


@pytest.fixture
def start_gateway(
    redis_url: str, decoder: BackgroundServer
) -> Iterator[Callable[..., support.GatewayServer]]:
    """Starts real gateways over this module's decoder and Redis (`overrides`: settings such as
    api_keys); stops them after the test."""
    servers: list[support.GatewayServer] = []

    def start(**overrides: Any) -> support.GatewayServer:
        settings = support.gateway_settings([decoder.address], redis_url=redis_url, **overrides)
        servers.append(support.GatewayServer(settings))
        return servers[-1].start()

    yield start
    for server in servers:
        server.stop()
