"""`bench/decoder_startup.py --smoke`: a real decoder started with the capture list on and off,
each timed to its first answered call (on the CPU nothing is captured either way)."""

from __future__ import annotations

from pathlib import Path

from tests.bench.smoke import run_smoke


def test_decoder_startup_smoke(tmp_path: Path) -> None:
    report, stdout = run_smoke("decoder_startup.py", tmp_path)
    rows = report["rows"]
    assert [row["capture_at_start"] for row in rows] == [True, False]
    for row in rows:
        assert row["max_rows"] == 64 and row["ready_s"] > 0, row
        assert row["graphs"] == 0 and row["buckets"] == 0, row  # no CUDA graphs on the CPU
    assert "| max rows | capture at start |" in stdout
