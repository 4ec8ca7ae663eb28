"""`bench/ab_stack.py --smoke`: two decoders (B from another tree, here this one through the
package shim), each phase answered, the order swapped every round, B's ratio per round."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.bench.smoke import BENCH, run_smoke

ROOT = BENCH.parent


def test_ab_stack_smoke(tmp_path: Path) -> None:
    report, stdout = run_smoke("ab_stack.py", tmp_path, "--other-tree", str(ROOT))
    assert report["env"]["b_imports_from"] == str((ROOT / "services").resolve())
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


def test_a_tree_without_the_packages_is_refused(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "ab_stack.py", "--other-tree", str(tmp_path)], cwd=BENCH,
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2 and "holds no widebeam/ and services/" in done.stderr
