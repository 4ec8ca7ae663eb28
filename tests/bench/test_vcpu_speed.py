"""`bench/vcpu_speed.py`: a probe time for every CPU this process may run on, alone and (with
--pairs) beside a spinner on each other CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.bench.smoke import BENCH


def test_every_cpu_is_probed() -> None:
    done = subprocess.run(
        [sys.executable, "vcpu_speed.py", "--rounds", "2", "--pause-s", "0", "--pairs"],
        cwd=BENCH, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    cpus = sorted(os.sched_getaffinity(0))
    assert report["cpus"] == cpus
    assert len(report["alone"]) == 2
    for row in report["alone"]:
        assert sorted(int(c) for c in row) == cpus and min(row.values()) > 0
    for spun, row in report["beside_spinner"].items():
        assert sorted(int(c) for c in row) == [c for c in cpus if c != int(spun)]
