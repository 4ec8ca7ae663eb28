"""`bench/prefill_graph_limit.py --smoke`: both engines timed in alternation, every request
answered, the report's medians and paired ratio computed from its phases."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.bench.smoke import BENCH, run_smoke


def test_prefill_graph_limit_smoke(tmp_path: Path) -> None:
    report, stdout = run_smoke(
        "prefill_graph_limit.py", tmp_path, "--limits", "2048,4096,2048+split"
    )
    phases = report["phases"]
    assert [(p["variant"], p["round"]) for p in phases] == [
        ("2048", 0),
        ("4096", 0),
        ("2048+split", 0),
        ("2048+split", 1),
        ("4096", 1),
        ("2048", 1),
    ]  # the order swapped every round
    assert {(p["variant"], p["limit"], p["split"]) for p in phases} == {
        ("2048", 2048, False), ("4096", 4096, False), ("2048+split", 2048, True),
    }  # fmt: skip
    for phase in phases:
        assert phase["answered_rps"] > 0 and phase["p99_ms"] >= phase["p50_ms"] > 0
        assert phase["prefills_per_request"] > 0
        # CPU has no graphs: every prefill is launched op by op
        assert phase["eager_prefills_per_request"] == phase["prefills_per_request"]
        assert phase["split_prefills_per_request"] == 0  # (nor graph-sized batches to split)
    assert set(report["median_rps"]) == {"2048", "4096", "2048+split"}
    assert set(report["paired_ratio_median"]) == {"4096", "2048+split"}
    assert report["captures_after_ready"] == {"2048": 0, "4096": 0, "2048+split": 0}
    assert "limit 4096: median" in stdout and "limit 2048+split: median" in stdout


def test_bad_limits_are_refused(tmp_path: Path) -> None:
    for bad in ("0,4096", "2048,2048", "x", "2048+splt", "+split", ""):
        done = subprocess.run(
            [sys.executable, "prefill_graph_limit.py", "--limits", bad], cwd=BENCH,
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert done.returncode == 2 and "--limits must" in done.stderr, bad
