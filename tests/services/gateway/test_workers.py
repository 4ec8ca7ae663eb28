"""`widebeam gateway serve --workers 2`: two real worker processes on one port answer
recommendations over real HTTP (each answer names its worker), a killed worker is started again,
a SIGTERM stops them all."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.services.gateway.conftest import HISTORY
from widebeam.cli import build_parser
from widebeam.services.decoder.server.background import BackgroundServer
from widebeam.services.gateway.cli import settings_from_args
from widebeam.services.gateway.settings import GatewaySettings
from widebeam.services.gateway.worker_header import WORKER_HEADER

BODY = {"history": HISTORY, "n": 3, "beam_width": 4}


def test_workers_flag_and_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    assert GatewaySettings().workers == 1
    monkeypatch.setenv("WIDEBEAM_GATEWAY_WORKERS", "4")
    assert GatewaySettings().workers == 4
    args = build_parser().parse_args(["gateway", "serve", "--workers", "3"])
    assert settings_from_args(args).workers == 3
    with pytest.raises(ValueError, match="workers: Input should be greater than or equal to 1"):
        settings_from_args(build_parser().parse_args(["gateway", "serve", "--workers", "0"]))


def worker_pids(pid: int) -> set[int]:
    """The child processes of `pid` but multiprocessing's resource tracker; a child that is
    gone by the time its command line is read (a killed worker being reaped) is left out."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    workers = set()
    for child in children:
        try:
            command = Path(f"/proc/{child}/cmdline").read_bytes()
        except FileNotFoundError:
            continue
        if b"resource_tracker" not in command:
            workers.add(int(child))
    return workers


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_two_workers_serve_one_port(decoder_server: BackgroundServer) -> None:
    command = [
        sys.executable, "-m", "widebeam.cli", "gateway", "serve", "--port", "0",
        "--workers", "2", "--decoder", decoder_server.address,
    ]  # fmt: skip
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    lines: list[str] = []
    assert proc.stderr is not None
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr or []), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 60
        url = None
        while url is None and time.monotonic() < deadline and proc.poll() is None:
            match = re.search(r"gateway listening on (http://\S+) \(2 workers", "".join(lines))
            url = match.group(1) if match else None
            time.sleep(0.05)
        assert url, "".join(lines)
        workers = worker_pids(proc.pid)
        assert len(workers) == 2, workers

        # A new connection per request: the kernel spreads connections over the workers.
        seen: dict[str, int] = {}
        deadline = time.monotonic() + 60
        while set(seen) != {"0", "1"} and time.monotonic() < deadline:
            try:
                response = httpx.post(f"{url}/v1/recommend", json=BODY, timeout=30)
            except httpx.TransportError:  # a worker still starting
                time.sleep(0.1)
                continue
            if response.status_code == 503:  # its first GetInfo not answered yet
                time.sleep(0.1)
                continue
            assert response.status_code == 200, response.text
            assert len(response.json()["items"]) == 3
            worker = response.headers[WORKER_HEADER]
            seen[worker] = seen.get(worker, 0) + 1
        assert set(seen) == {"0", "1"}, (seen, "".join(lines))

        # A worker that dies is started again, and the gateway keeps answering meanwhile.
        killed = min(workers)
        os.kill(killed, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            current = worker_pids(proc.pid)
            if killed not in current and len(current) == 2:
                break
            time.sleep(0.05)
        assert killed not in current and len(current) == 2, (current, "".join(lines))
        workers |= current
        deadline = time.monotonic() + 60
        answered = 0
        while answered < 5 and time.monotonic() < deadline:
            try:
                response = httpx.post(f"{url}/v1/recommend", json=BODY, timeout=30)
            except httpx.TransportError:
                time.sleep(0.1)
                continue
            answered += response.status_code == 200
        assert answered == 5
        assert "exited with -9; starting it again" in "".join(lines)

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=40) == 0, "".join(lines)
        deadline = time.monotonic() + 10
        while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(alive(pid) for pid in workers), "a worker outlived the gateway"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(5)
    assert "gateway worker 0 serving" in "".join(lines)
    assert "gateway worker 1 serving" in "".join(lines)
