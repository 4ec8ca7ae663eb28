"""`bench/tracing.host_clock`: the engine's phases timed on the host without a profiler;
`tracing.recorded`: what the run options ask of a timed phase, its recorders nested."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

from tests.bench.smoke import BENCH
from widebeam.services.decoder.config import EngineConfig
from widebeam.services.decoder.engine import Engine
from widebeam.services.decoder.requests.spec import GenerationRequest
from widebeam.services.decoder.testing.tiny_model import write_tiny_model


def _tracing():  # bench/tracing.py, imported by plain name as bench/'s scripts do
    sys.path.insert(0, str(BENCH))  # tracing imports nothing else of bench/, but by plain name
    try:
        import tracing
    finally:
        sys.path.remove(str(BENCH))
    return tracing


def _engine_and_requests(tmp_path: Path) -> tuple[Engine, list[GenerationRequest]]:
    model = write_tiny_model(tmp_path / "model", base_vocab=64, seed=3)
    engine = Engine(EngineConfig(model_dir=str(model), max_rows=8))
    requests = [
        GenerationRequest(f"r{i}", (1, 2, 3 + i), beam_width=2, n=2, max_new_tokens=3)
        for i in range(2)
    ]
    return engine, requests


def _run(engine: Engine, requests: list[GenerationRequest]) -> None:
    for request in requests:
        engine.submit(request)
    done = []
    while len(done) < len(requests):
        done += engine.step()


def test_host_clock_times_every_phase_and_restores_the_engine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tracing = _tracing()
    engine, requests = _engine_and_requests(tmp_path)
    with tracing.host_clock(engine, "tiny", len(requests)):
        _run(engine, requests)
    report = capsys.readouterr().out
    assert "--- host clock tiny:" in report and "over 2" in report
    for phase in ("admit", "prefill", "finish"):
        assert f"  {phase} " in report, report
    assert "allocator: num_device_alloc" in report
    # The wrappers are the instance's own attributes while the block runs, gone after it.
    assert "_prefill" not in vars(engine)
    assert "admit" not in vars(engine.scheduler)


def test_recorded_nests_the_asked_recorders_and_restores_the_engine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    tracing = _tracing()
    monkeypatch.setenv("OUT", str(tmp_path / "out"))
    engine, requests = _engine_and_requests(tmp_path)
    both = argparse.Namespace(trace=True, host_clock=True, sync_debug=False)
    with tracing.recorded(engine, "tiny_A1", len(requests), both):
        _run(engine, requests)
    report = capsys.readouterr().out
    assert "--- host clock tiny_A1: " in report and "--- trace tiny_A1\n" in report
    assert (tmp_path / "out" / "trace_tiny_A1.json.gz").stat().st_size > 0
    assert "_prefill" not in vars(engine) and "admit" not in vars(engine.scheduler)
    neither = argparse.Namespace(trace=False)  # a script without --host-clock
    with tracing.recorded(engine, "tiny_B1", len(requests), neither):
        _run(engine, [GenerationRequest("r9", (1, 2, 9), beam_width=2, n=2, max_new_tokens=3)])
    assert "tiny_B1" not in capsys.readouterr().out
