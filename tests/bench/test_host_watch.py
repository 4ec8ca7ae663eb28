"""`bench/host_watch.py`: a real watcher process writes one JSON line per interval, names a
process that spun meanwhile among the busiest, and stops cleanly on SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.bench.smoke import BENCH

SPIN = "import time\nend = time.monotonic() + 120\nwhile time.monotonic() < end: pass\n"


def test_the_watcher_samples_until_stopped(tmp_path: Path) -> None:
    out = tmp_path / "watch.jsonl"
    spinner = subprocess.Popen([sys.executable, "-c", SPIN])
    watcher = subprocess.Popen(
        [sys.executable, "host_watch.py", "--out", str(out), "--interval-s", "0.2"], cwd=BENCH
    )
    try:
        deadline = time.monotonic() + 120
        while not out.exists() or len(out.read_text().splitlines()) < 3:
            assert watcher.poll() is None, "the watcher exited on its own"
            assert time.monotonic() < deadline, "no samples within 120 s"
            time.sleep(0.1)
    finally:
        spinner.kill()
        watcher.send_signal(signal.SIGTERM)
        assert watcher.wait(timeout=60) == 0  # a clean stop, not a traceback
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) >= 3
    for row in rows:
        assert row["probe_ms"] > 0 and row["host_cores"] >= 0 and row["steal_cores"] >= 0
        assert all(cores > 0 for _, _, cores in row["top"])
    assert [r["unix"] for r in rows] == sorted(r["unix"] for r in rows)
    # the spinner took a core's worth in some interval: listed among the busiest
    assert any(pid == spinner.pid for row in rows for pid, _, _ in row["top"])


def test_a_bad_interval_is_refused(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "host_watch.py", "--out", str(tmp_path / "w"), "--interval-s", "0"],
        cwd=BENCH, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2 and "--interval-s must be > 0" in done.stderr
