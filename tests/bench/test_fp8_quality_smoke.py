"""`bench/fp8_quality.py --smoke`: the FP8 quality gate's script end to end on the CPU (the
demo's tiny world, trained, served in the model dtype, with FP8 linears and KV cache, with the LM
head in FP8 too, with the attention's queries in FP8, and with its probabilities too): every row
reported, no illegal SID, overlaps within their bounds."""

from __future__ import annotations

from pathlib import Path

from tests.bench.smoke import run_smoke


def test_fp8_quality_smoke_run(tmp_path: Path) -> None:
    report, stdout = run_smoke(
        "fp8_quality.py", tmp_path, "--head-quantization", "fp8", "--kv-dtype", "fp8",
        "--kv-fp8-queries", "--kv-fp8-probabilities", own_tmpdir=True,
        report="fp8_quality_fp8_kv_fp8",
    )  # fmt: skip
    arms = [
        (r["quantization"], r["kv_dtype"], r["head_quantization"], r["kv_fp8_queries"],
         r["kv_fp8_probabilities"])
        for r in report["rows"]
    ]  # fmt: skip
    assert arms == [
        ("none", "auto", "none", False, False),
        ("fp8", "fp8", "none", False, False),
        ("fp8", "fp8", "fp8", False, False),
        ("fp8", "fp8", "none", True, False),
        ("fp8", "fp8", "none", True, True),
    ]
    for row in report["rows"]:
        assert row["illegal_sids"] == 0 and 0 <= row["recall@10"] <= 1, row
    width = report["env"]["width"]
    assert 0 <= report["top10_overlap"] <= 10 and 0 <= report["top50_overlap"] <= width
    for row in report["rows"][1:]:
        assert 0 <= row["top10_overlap"] <= 10 and 0 <= row["top50_overlap"] <= width, row
        assert row["recall_relative_change"] >= -1, row
    assert "recall@10 relative change" in stdout
    assert "with the LM head in FP8: recall@10 relative change" in stdout
    assert "with the attention's queries in FP8: recall@10 relative change" in stdout
    assert (
        "with the attention's queries and its probabilities in FP8: recall@10 relative change"
        in stdout
    )
