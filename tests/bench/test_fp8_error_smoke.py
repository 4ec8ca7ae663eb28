"""`bench/fp8_error.py --smoke`: the per-layer FP8 GEMM error report, on the tiny model on the
CPU; every GEMM of every layer is reported, quantized (error above bf16's) and within 5%."""

from __future__ import annotations

from pathlib import Path

from tests.bench.smoke import run_smoke


def test_fp8_error_smoke_run(tmp_path: Path) -> None:
    report, stdout = run_smoke("fp8_error.py", tmp_path, timeout=300)
    rows = report["rows"]
    assert {(r["layer"], r["gemm"]) for r in rows} == {
        (layer, gemm) for layer in range(2) for gemm in ("qkv", "o", "gate_up", "down")
    }
    for row in rows:
        assert row["gemm_path"] == "torch"
        assert 5 * row["bf16_rel_error"] < row["fp8_rel_error"] < 0.05, row
    assert "| gate_up | 256x64 |" in stdout
