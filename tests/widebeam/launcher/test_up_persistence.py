"""`widebeam up` keeps Redis's data in its state directory: a catalog uploaded with the
documented `widebeam catalog upload ... --name default` and a finished batch job are there
again after the stack is stopped and started anew; one launcher at a time owns a state
directory; `--no-persist` keeps nothing."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.services.decoder.conftest import SidModel
from tests.support.redis_server import find_redis_server, free_port
from tests.widebeam.stack import launch, start_stack, stop_stack, summary_urls

pytestmark = pytest.mark.skipif(find_redis_server() is None, reason="needs redis-server")

LIMIT_S = 300  # a hang guard


def _recommend(base: str, sid_model: SidModel) -> httpx.Response:
    body = {"history": [item for item, _ in sid_model.catalog[:3]], "n": 4, "beam_width": 8}
    return httpx.post(f"{base}/v1/recommend", json=body, timeout=60)


def _job_status(base: str, job_id: str) -> str:
    return str(httpx.get(f"{base}/v1/batch-jobs/{job_id}", timeout=60).json()["status"])


def _wait(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + LIMIT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def _upload(sid_model: SidModel, catalog_url: str) -> None:
    # The README's command; `--url` only because the test cannot take the default port.
    argv = [sys.executable, "-m", "widebeam", "catalog", "upload", str(sid_model.catalog_path),
            "--name", "default", "--url", catalog_url, "--no-progress"]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=LIMIT_S)
    assert done.returncode == 0, done.stderr


def test_catalogs_and_batch_jobs_survive_a_restart(sid_model: SidModel, tmp_path: Path) -> None:
    first_log, second_log = tmp_path / "first", tmp_path / "second"
    first_log.mkdir()
    second_log.mkdir()
    state = ["--state-dir", str(tmp_path / "state")]
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc, log = start_stack(sid_model.model_dir, None, port, first_log, *state)
    try:
        _upload(sid_model, summary_urls(log)["catalog service"])
        _wait(lambda: _recommend(base, sid_model).status_code == 200, "the uploaded catalog")
        rows = [{"history": [item], "n": 2} for item, _ in sid_model.catalog[:3]]
        job = httpx.post(f"{base}/v1/batch-jobs", json={"requests": rows}, timeout=60).json()
        _wait(lambda: _job_status(base, job["id"]) == "succeeded", "the batch job")
        results = httpx.get(f"{base}/v1/batch-jobs/{job['id']}/results", timeout=60).text
        # A second launcher on the same state directory is refused before it starts anything.
        clash, clash_log = launch(sid_model.model_dir, None, free_port(), second_log, *state)
        assert clash.wait(LIMIT_S) == 1
        assert "another `widebeam up` uses the state directory" in clash_log.read_text()
    finally:
        assert stop_stack(proc) == 0, log.read_text()[-3000:]
    assert (tmp_path / "state" / "redis").is_dir()

    proc, log = start_stack(sid_model.model_dir, None, port, second_log, *state)
    try:
        again = _recommend(base, sid_model)
        assert again.status_code == 200, again.text
        assert again.json()["catalog"] == {"name": "default", "version": "1"}
        assert _job_status(base, job["id"]) == "succeeded"
        assert httpx.get(f"{base}/v1/batch-jobs/{job['id']}/results", timeout=60).text == results
    finally:
        assert stop_stack(proc) == 0, log.read_text()[-3000:]


def test_no_persist_keeps_nothing(sid_model: SidModel, tmp_path: Path) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc, log = start_stack(sid_model.model_dir, sid_model.catalog_path, port, tmp_path,
                            "--no-persist")  # fmt: skip
    try:
        assert _recommend(base, sid_model).status_code == 200
        assert "no persistence (--no-persist)" in log.read_text()
    finally:
        assert stop_stack(proc) == 0, log.read_text()[-3000:]
    assert not (tmp_path / "state").exists()
