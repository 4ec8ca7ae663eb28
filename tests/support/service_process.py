"""A `widebeam ...` service as a real child process: its log in a file, its URL read from its
'listening on' line, optionally a lower open-file limit (to reach descriptor exhaustion with a
few hundred connections rather than tens of thousands), its RSS from /proc."""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.child_process import stop_child

LISTENING = re.compile(r"listening on http://127\.0\.0\.1:(\d+)")


@dataclass
class ServiceProcess:
    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path

    def log_lines(self) -> list[str]:
        return self.log_path.read_text(errors="replace").splitlines()

    def rss_bytes(self) -> int:
        with open(f"/proc/{self.proc.pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS in /proc status")


@contextmanager
def service_process(
    args: list[str], env: dict[str, str], log_path: Path, max_open_files: int | None = None
) -> Iterator[ServiceProcess]:
    """`python -m widebeam ARGS` until the block ends (SIGTERM, then SIGKILL)."""

    def limit_files() -> None:
        if max_open_files is not None:
            _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            resource.setrlimit(resource.RLIMIT_NOFILE, (max_open_files, hard))

    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **env}
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "widebeam", *args],
            env=full_env,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=limit_files,
        )
    try:
        deadline = time.monotonic() + 120
        while (match := LISTENING.search(log_path.read_text(errors="replace"))) is None:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{args[:2]} did not start:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.05)
        yield ServiceProcess(proc, int(match[1]), log_path)
    finally:
        stop_child(proc)
