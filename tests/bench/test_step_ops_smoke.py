"""`bench/step_ops.py --smoke`: an in-process engine's closed loop counted by phase, the
forwards and expansions once each, the views apart."""

from __future__ import annotations

from pathlib import Path

from tests.bench.smoke import run_smoke


def test_step_ops_smoke(tmp_path: Path) -> None:
    report, stdout = run_smoke("step_ops.py", tmp_path)
    phases = report["per_request"]
    # every request is prefilled, decoded and expanded: each counted once per call, no views
    for once in ("(model forward)", "(beam expansion)"):
        assert phases[once]["calls"] > 0 and phases[once]["views"] == 0, phases[once]
        assert phases[once]["top"] == {}  # nothing inside them is counted
    for phase in ("engine.select", "engine.prefill"):
        entry = phases[phase]
        assert 0 <= entry["views"] <= entry["calls"], entry
        assert entry["calls"] > 0 and entry["top"], entry
    assert "operator calls per request" in stdout
