"""`bench/catalog_gil.py --smoke`: every phase is timed twice with its longest GIL hold, and the
finished beams' item lookup is timed; no figure is asserted (they depend on the machine)."""

from __future__ import annotations

from pathlib import Path

from tests.bench.smoke import run_smoke


def test_catalog_gil_smoke_run(tmp_path: Path) -> None:
    report, stdout = run_smoke("catalog_gil.py", tmp_path, timeout=300)
    phases = [row["phase"] for row in report["phases"]]
    assert phases == [
        "SidTrie.from_arrays", "ServedCatalog.build (all in this process)",
        "constraint_arrays (the load child's part)", "ServedCatalog.build from derived arrays",
        "drop a served version", "gc.collect() after the drop",
    ] * 2  # fmt: skip
    for row in report["phases"]:
        assert row["ms"] >= 0 and row["longest_gil_hold_ms"] > 0
    assert report["items"] == 20_000 and report["beams"] == 100 and report["path_items_ms"] > 0
    assert "| PathItems.items (100 beams) |" in stdout
