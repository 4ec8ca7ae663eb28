"""`bench/ab_stack.py --smoke`: two decoders (B from another tree, here this one through the
package shim), each phase answered, the order swapped every round, B's ratio per round."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench.smoke import BENCH, run_smoke

ROOT = BENCH.parent


def test_ab_stack_smoke(tmp_path: Path) -> None:
    # B: this tree through the package shim, with a decoder flag of its own
    report, stdout = run_smoke(
        "ab_stack.py", tmp_path, "--other-tree", str(ROOT), "--b-args", "--max-waiting 64"
    )
    assert report["env"]["b_imports_from"] == str((ROOT / "services").resolve())
    assert report["env"]["b_args"] == "--max-waiting 64"
    rows = report["phases"]
    # round 0: A then B; round 1: B then A; gRPC and REST each
    assert [(r["side"], r["round"]) for r in rows][::2] == [("A", 0), ("B", 0), ("B", 1), ("A", 1)]
    for row in rows:
        answered = sum(row["statuses"].get(ok, 0) for ok in ("OK", "200"))
        assert answered == sum(row["statuses"].values()) == 4, row
        assert row["batching"]["requests_per_prefill"] >= 1, row
    summary = {(e["path"], e["width"]): e for e in report["summary"]}
    assert set(summary) == {("grpc Recommend", 4), ("REST /v1/recommend", 4)}
    for entry in summary.values():
        assert len(entry["b_over_a"]) == 2 and min(entry["b_over_a"]) > 0
    assert "median B ÷ A" in stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--other-tree", "{tmp}"], "holds no widebeam/ and services/"),
        ([], "B must differ from A"),
    ],
)
def test_bad_sides_are_refused(tmp_path: Path, args: list[str], message: str) -> None:
    cmd = [sys.executable, "ab_stack.py", *(a.format(tmp=tmp_path) for a in args)]
    done = subprocess.run(cmd, cwd=BENCH, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and message in done.stderr
