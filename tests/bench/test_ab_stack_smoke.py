"""`bench/ab_stack.py --smoke`: A and two variants (from another tree, here this one through
the package shim, each with a decoder flag of its own, the second with two gateway workers),
each phase answered, the order rotated every round, each variant's ratio to A per round."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench.smoke import BENCH, load_bench_module, run_smoke

ROOT = BENCH.parent


def test_phases_are_sized_by_the_closed_loops_latency_not_a_short_waves_wall_time() -> None:
    phase_requests = load_bench_module("ab_stack").phase_requests
    # 12 clients at 50 ms a request answer 240 a second: 720 in a 3 s phase, whatever the
    # warm wave's wall time was.
    assert phase_requests(12, [40.0, 60.0] * 12, 3.0, 96) == 720
    assert phase_requests(12, [500.0] * 24, 3.0, 96) == 96  # slow: the floor
    assert phase_requests(12, [], 3.0, 96) == 96  # nothing answered: the floor
    assert phase_requests(12, [50.0] * 24, 0.0, 4) == 4  # --smoke: the floor alone


def test_ab_stack_smoke(tmp_path: Path) -> None:
    report, stdout = run_smoke(
        "ab_stack.py", tmp_path, "--other-tree", str(ROOT),
        "--b-args", "--max-waiting 64", "--b-args=--max-waiting=32 --gateway --workers 2",
    )  # fmt: skip
    assert report["env"]["variants_import_from"] == str((ROOT / "services").resolve())
    assert report["env"]["variants"] == {
        "B": "--max-waiting 64", "C": "--max-waiting=32 --gateway --workers 2"
    }  # fmt: skip
    assert report["env"]["variant_gateway_flags"] == {"B": [], "C": ["--workers", "2"]}
    rows = report["phases"]
    # round 0: A, B, C; round 1: B, C, A; gRPC and REST each
    assert [(r["side"], r["round"]) for r in rows][::2] == [
        ("A", 0), ("B", 0), ("C", 0), ("B", 1), ("C", 1), ("A", 1)
    ]  # fmt: skip
    for row in rows:
        answered = sum(row["statuses"].get(ok, 0) for ok in ("OK", "200"))
        assert answered == sum(row["statuses"].values()) == 4, row
        assert row["batching"]["requests_per_prefill"] >= 1, row
    summary = {(e["variant"], e["path"], e["width"]): e for e in report["summary"]}
    assert set(summary) == {
        (variant, path, 4) for variant in "BC" for path in ("grpc Recommend", "REST /v1/recommend")
    }
    for entry in summary.values():
        assert len(entry["over_a"]) == 2 and min(entry["over_a"]) > 0
    assert "median ÷ A" in stdout and "C: A's flags and --max-waiting=32 --gateway" in stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--other-tree", "{tmp}"], "holds no widebeam/ and services/"),
        ([], "each variant must differ from A"),
        (["--b-args=--x", "--b-args="], "each variant must differ from A"),
        (["--b-args=--a", "--b-args=--b", "--b-args=--c"], "at most 2 variants"),
    ],
)
def test_bad_sides_are_refused(tmp_path: Path, args: list[str], message: str) -> None:
    cmd = [sys.executable, "ab_stack.py", *(a.format(tmp=tmp_path) for a in args)]
    done = subprocess.run(cmd, cwd=BENCH, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and message in done.stderr
