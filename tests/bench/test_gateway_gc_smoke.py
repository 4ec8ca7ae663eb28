"""`bench/gateway_gc.py --smoke`: a real decoder and two gateway processes (freeze off, then on),
each answering its closed loop; the report holds each run's collector passes by generation
(counted from the app's ready point) and its gateway part of the latency from Server-Timing."""

from __future__ import annotations

from pathlib import Path

from tests.bench.smoke import run_smoke


def test_gateway_gc_smoke_run(tmp_path: Path) -> None:
    report, stdout = run_smoke("gateway_gc.py", tmp_path, "--cache", str(tmp_path))
    runs = report["runs"]
    assert [r["mode"] for r in runs] == ["off", "on"]
    for run in runs:
        assert run["requests"] == 40, run  # every request answered
        assert set(run["passes"]) == {"0", "1", "2"}, run
        assert run["passes"]["0"]["count"] > 0, run  # the timer saw the app's collections
        part = run["gateway_part_ms"]
        assert 0 <= part["p50"] <= part["p99"] <= part["max"], run
    assert "| freeze | requests | gen2 passes |" in stdout
