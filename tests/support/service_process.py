"""A `widebeam ...` service as a real child process: its log in a file, its URL read from its
'listening on' line, optionally a lower open-file limit (to reach descriptor exhaustion with a
few hundred connections rather than tens of thousands), its RSS from /proc."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.child_process import stop_child

LISTENING = re.compile(r"listening on http://127\.0\.0\.1:(\d+)")
# argv: the open-file limit, then the command to exec under it
_WITH_FILE_LIMIT = (
    "import os, resource, sys; "
    "hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]; "
    "resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]), hard)); "
    "os.execv(sys.argv[2], sys.argv[2:])"
)


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

    command = [sys.executable, "-m", "widebeam", *args]
    if max_open_files is not None:
        # A small interpreter sets the limit and execs the service (same pid). Not preexec_fn:
        # that runs Python in a fork of this process, which breaks when other threads of the
        # test process are inside gRPC at that moment (its fork handlers are skipped).
        command = [sys.executable, "-c", _WITH_FILE_LIMIT, str(max_open_files), *command]
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **env}
    with log_path.open("wb") as log:
        proc = subprocess.Popen(command, env=full_env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while (match := LISTENING.search(log_path.read_text(errors="replace"))) is None:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{args[:2]} did not start:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.05)
        if max_open_files is not None:
            assert _open_file_limit(proc.pid) == max_open_files
        yield ServiceProcess(proc, int(match[1]), log_path)
    finally:
        stop_child(proc)


def _open_file_limit(pid: int) -> int:
    """The soft open-file limit of process `pid`, from /proc."""
    with open(f"/proc/{pid}/limits") as fh:
        for line in fh:
            if line.startswith("Max open files"):
                return int(line.split()[3])
    raise RuntimeError("no open-file limit in /proc limits")
