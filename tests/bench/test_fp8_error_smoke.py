"""`bench/fp8_error.py --smoke`: the per-layer FP8 GEMM error report, on the tiny model on the
CPU; every GEMM of every layer is reported, quantized (error above bf16's) and within 5%."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_fp8_error_smoke_run(tmp_path: Path) -> None:
    env = os.environ | {"OUT": str(tmp_path / "out"), "WIDEBEAM_BENCH_CACHE": str(tmp_path)}
    cmd = [sys.executable, "fp8_error.py", "--smoke"]
    done = subprocess.run(cmd, cwd=BENCH, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = json.loads((tmp_path / "out" / "fp8_error.json").read_text())["rows"]
    assert {(r["layer"], r["gemm"]) for r in rows} == {
        (layer, gemm) for layer in range(2) for gemm in ("qkv", "o", "gate_up", "down")
    }
    for row in rows:
        assert row["gemm_path"] == "torch"
        assert 5 * row["bf16_rel_error"] < row["fp8_rel_error"] < 0.05, row
    assert "| gate_up | 256x64 |" in done.stdout
