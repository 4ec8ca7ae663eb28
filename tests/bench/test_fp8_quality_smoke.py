"""`bench/fp8_quality.py --smoke`: the FP8 quality gate's script end to end on the CPU (the
demo's tiny world, trained, served with and without FP8): both rows reported, no illegal SID,
overlaps within their bounds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_fp8_quality_smoke_run(tmp_path: Path) -> None:
    env = os.environ | {"OUT": str(tmp_path / "out"), "TMPDIR": str(tmp_path)}
    cmd = [sys.executable, "fp8_quality.py", "--smoke"]
    done = subprocess.run(cmd, cwd=BENCH, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((tmp_path / "out" / "fp8_quality.json").read_text())
    assert [r["quantization"] for r in report["rows"]] == ["none", "fp8"]
    for row in report["rows"]:
        assert row["illegal_sids"] == 0 and 0 <= row["recall@10"] <= 1, row
    width = report["env"]["width"]
    assert 0 <= report["top10_overlap"] <= 10 and 0 <= report["top50_overlap"] <= width
    assert "recall@10 relative change" in done.stdout
