"""`bench/fp8_quality.py --smoke`: the FP8 quality gate's script end to end on the CPU (the
demo's tiny world, trained, served with and without FP8): both rows reported, no illegal SID,
overlaps within their bounds."""

from __future__ import annotations

from pathlib import Path

from tests.bench.smoke import run_smoke


def test_fp8_quality_smoke_run(tmp_path: Path) -> None:
    report, stdout = run_smoke("fp8_quality.py", tmp_path, own_tmpdir=True)
    assert [r["quantization"] for r in report["rows"]] == ["none", "fp8"]
    for row in report["rows"]:
        assert row["illegal_sids"] == 0 and 0 <= row["recall@10"] <= 1, row
    width = report["env"]["width"]
    assert 0 <= report["top10_overlap"] <= 10 and 0 <= report["top50_overlap"] <= width
    assert "recall@10 relative change" in stdout
