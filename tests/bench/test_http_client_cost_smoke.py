"""`bench/http_client_cost.py --smoke`: both clients answered by a real gateway, each timed."""

from __future__ import annotations

from pathlib import Path

from tests.bench.smoke import run_smoke


def test_http_client_cost_smoke(tmp_path: Path) -> None:
    report, stdout = run_smoke("http_client_cost.py", tmp_path)
    runs = report["p50_ms"]
    assert set(runs) == {"httpx", "stream"}
    assert all(len(values) == 1 and values[0] > 0 for values in runs.values())
    assert "over the bare stream" in stdout
