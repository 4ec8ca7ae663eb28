"""Start `widebeam up` as a subprocess for end-to-end tests."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

# Start-up imports torch in five processes: minutes on a busy 2-core machine, so the limit is
# only a hang guard.
STARTUP_LIMIT_S = 600


def start_stack(
    model_dir: Path, catalog: Path | None, port: int, tmp_path: Path, *extra: str
) -> tuple[subprocess.Popen, Path]:
    """Run `widebeam up` until it prints its gateway line; returns the process and its log."""
    proc, log = launch(model_dir, catalog, port, tmp_path, *extra)
    gateway_url(proc, log)
    return proc, log


def launch(
    model_dir: Path, catalog: Path | None, port: int, tmp_path: Path, *extra: str
) -> tuple[subprocess.Popen, Path]:
    """Start `widebeam up` (in a process group of its own) without waiting for it. Every other
    service takes a free port (the defaults may be in use while tests run) and Redis keeps its
    data in `tmp_path/state` (`extra` may override both)."""
    log = tmp_path / "up.log"
    argv = [sys.executable, "-m", "widebeam", "up", "--model", str(model_dir), "--port", str(port)]
    argv += ["--catalog-port", "0", "--decoder-port", "0", "--redis-port", "0"]
    argv += ["--state-dir", str(tmp_path / "state")]
    if catalog is not None:
        argv += ["--catalog", str(catalog)]
    proc = subprocess.Popen(
        [*argv, *extra], stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True
    )
    return proc, log


def stop_stack(proc: subprocess.Popen) -> int:
    """SIGTERM to `widebeam up` (as Ctrl-C's stop); its exit code. Killed if it hangs."""
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(120)
    finally:
        if proc.poll() is None:
            proc.kill()


def gateway_url(proc: subprocess.Popen, log: Path) -> str:
    """The URL of the `gateway: URL` line `widebeam up` prints once the stack is ready."""
    deadline = time.monotonic() + STARTUP_LIMIT_S
    while time.monotonic() < deadline:
        found = re.search(r"^gateway: (http://\S+)$", log.read_text(), re.MULTILINE)
        if found:
            return found.group(1)
        if proc.poll() is not None:
            raise AssertionError("widebeam up exited:\n" + log.read_text()[-3000:])
        time.sleep(0.5)
    proc.kill()
    raise AssertionError("widebeam up did not become ready:\n" + log.read_text()[-3000:])


SUMMARY_ROW = re.compile(
    r"^  (gateway|playground|API docs|catalog service|metrics|decoder \(gRPC\)|Redis) +(\S+)",
    re.MULTILINE,
)


def summary_urls(log: Path) -> dict[str, str]:
    """Service -> URL, from the table `widebeam up` prints once the stack is ready."""
    return dict(SUMMARY_ROW.findall(log.read_text().split("widebeam up: ready", 1)[1]))
