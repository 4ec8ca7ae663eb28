"""`bench/fp8_gemm.py --smoke`: every part of the FP8 GEMM report on tiny shapes on the CPU
(torch reference paths, the Triton GEMM in the interpreter): each GEMM variant measured and
checked, the fused layer kernels bit-identical to layer-then-quantize and the Triton kernels
run the other way (one pass / two passes over chunks) to serving's, the layer chain timed."""

from __future__ import annotations

from pathlib import Path

from tests.bench.smoke import run_smoke

VARIANTS = {"bf16", "quant", "rowwise", "rowwise-fast", "tensorwise", "tensorwise-fast", "today"}


def test_fp8_gemm_smoke_run(tmp_path: Path) -> None:
    report, stdout = run_smoke("fp8_gemm.py", tmp_path, timeout=300)
    rows = report["gemm"]
    assert all("error" not in r for r in rows), [r for r in rows if "error" in r]
    for gemm in ("qkv", "o", "gate_up", "down"):
        for m in (24,):
            got = {r["variant"] for r in rows if r["gemm"] == gemm and r["m"] == m}
            assert got >= VARIANTS and sum(v.startswith("triton:") for v in got) == 2
    for r in rows:
        assert r["us"] > 0
        if r["variant"] != "quant":
            assert 0.02 < r["err_exact"] < 0.05 or r["variant"] == "bf16", r
        if "err_ref" in r:  # the same FP8 operands: bf16 rounding apart
            assert r["err_ref"] < 1e-2, r
    assert {(r["family"], r["m"]) for r in report["layers"]} == {
        (f, m) for f in ("rms_norm", "add_rms_norm", "silu_mul") for m in (24,)
    }
    assert all(r["mismatched_bytes"] == 0 and r["scales_equal"] for r in report["layers"])
    # the quantization pass alone, and the kernels the way serving does not run them
    assert all(r["quant"] > 0 and r["quant, other"] > 0 for r in report["layers"])
    assert all(r["fused, other"] > 0 for r in report["layers"] if r["family"] == "silu_mul")
    assert {r["mode"] for r in report["chain"]} == {
        "bf16",
        "fp8 unfused (before)",
        "fp8 fused",
    }
    assert all(r["us"] > 0 for r in report["chain"])
    assert "### o: 64 x 64 (out x in)" in stdout and "## 3. Decoder layers" in stdout
    assert not report["skipped"]
