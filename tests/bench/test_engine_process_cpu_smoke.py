"""`bench/engine_process_cpu.py --smoke`: a real decoder in each mode, the engine thread's and
the other threads' CPU per request read from /proc, the modes' runs in the report."""

from __future__ import annotations

from pathlib import Path

from tests.bench.smoke import run_smoke


def test_engine_process_cpu_smoke(tmp_path: Path) -> None:
    report, stdout = run_smoke("engine_process_cpu.py", tmp_path)
    runs = report["runs"]
    assert [run["api_processes"] for run in runs] == [0, 1]
    for run in runs:
        assert run["req_per_s"] > 0, run
        assert run["engine_thread_ms"] > 0, run  # the forwards run on it
        assert run["other_threads_ms"] >= 0 and run["api_processes_ms"] >= 0, run
    assert runs[0]["api_processes_ms"] == 0  # no API process in that mode
    assert "engine thread CPU ms/req" in stdout
