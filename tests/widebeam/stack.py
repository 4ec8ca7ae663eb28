"""Start `widebeam up` as a subprocess for end-to-end tests."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path


def start_stack(
    model_dir: Path, catalog: Path, port: int, tmp_path: Path, *extra: str
) -> tuple[subprocess.Popen, Path]:
    """Run `widebeam up` until it prints its gateway line; returns the process and its log."""
    log = tmp_path / "up.log"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "widebeam",
            "up",
            "--model",
            str(model_dir),
            "--catalog",
            str(catalog),
            "--port",
            str(port),
            *extra,
        ],
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.time() + 180
    while time.time() < deadline:
        text = log.read_text()
        if f"gateway: http://127.0.0.1:{port}" in text:
            return proc, log
        if proc.poll() is not None:
            raise AssertionError("widebeam up exited:\n" + text[-3000:])
        time.sleep(0.5)
    proc.kill()
    raise AssertionError("widebeam up did not become ready:\n" + log.read_text()[-3000:])
