"""`widebeam up` end to end: real child processes, a recommendation over HTTP, clean stops."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.services.decoder.conftest import SidModel
from tests.support.redis_server import find_redis_server, free_port
from tests.widebeam.stack import start_stack

pytestmark = pytest.mark.skipif(find_redis_server() is None, reason="needs redis-server")


def _start(sid_model: SidModel, port: int, tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    return start_stack(sid_model.model_dir, sid_model.catalog_path, port, tmp_path)


def _children_of(proc: subprocess.Popen) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


def _gone(pids: list[int]) -> bool:
    for pid in pids:
        try:
            os.kill(pid, 0)
            return False
        except ProcessLookupError:
            continue
    return True


def test_up_serves_recommendations_and_stops_cleanly(sid_model: SidModel, tmp_path: Path) -> None:
    port = free_port()
    proc, log = _start(sid_model, port, tmp_path)
    children = _children_of(proc)
    try:
        assert len(children) == 5  # redis, catalog, decoder, gateway, worker
        items = [item for item, _ in sid_model.catalog[:3]]
        reply = httpx.post(
            f"http://127.0.0.1:{port}/v1/recommend",
            timeout=60,
            json={"history": items, "n": 4, "beam_width": 8},
        )
        assert reply.status_code == 200, reply.text
        body = reply.json()
        assert len(body["items"]) == 4 and body["catalog"]["name"] == "default"
        assert "upload | catalog 'default' version 1" in log.read_text()
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
    assert code == 0, log.read_text()[-3000:]
    assert _gone(children)


def test_up_stops_everything_when_a_child_dies(sid_model: SidModel, tmp_path: Path) -> None:
    port = free_port()
    proc, log = _start(sid_model, port, tmp_path)
    children = _children_of(proc)
    try:
        decoder = [
            pid
            for pid in children
            if b"widebeam\0decoder\0serve" in Path(f"/proc/{pid}/cmdline").read_bytes()
        ]
        assert len(decoder) == 1
        os.kill(decoder[0], signal.SIGKILL)
        code = proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 1
    assert "decoder exited" in log.read_text()
    assert _gone(children)
