"""`bench/prefill_tiles.py --smoke`: the prefill kernel's default tiles in Triton's interpreter
give the fp32 reference's attention with bf16-sized and FP8 K/V (the script's own check)."""

from __future__ import annotations

from pathlib import Path

from tests.bench.smoke import run_smoke


def test_default_tiles_match_the_reference(tmp_path: Path) -> None:
    report, stdout = run_smoke("prefill_tiles.py", tmp_path, timeout=300)
    rows = report["rows"]
    assert [(r["KV"], r["M rows"], r["key block"]) for r in rows] == [
        ("bf16", 64, 64),
        ("fp8", 64, 64),
    ]
    assert all(r["check"] == "ok" for r in rows), rows
    assert "| 64 | fp8 | 64 | 64 | 4 | 3 |" in stdout
