"""`bench/tracing.host_clock`: the engine's phases timed on the host without a profiler."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.bench.smoke import BENCH
from widebeam.services.decoder.config import EngineConfig
from widebeam.services.decoder.engine import Engine
from widebeam.services.decoder.requests.spec import GenerationRequest
from widebeam.services.decoder.testing.tiny_model import write_tiny_model


def test_host_clock_times_every_phase_and_restores_the_engine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sys.path.insert(0, str(BENCH))  # tracing imports nothing else of bench/, but by plain name
    try:
        import tracing
    finally:
        sys.path.remove(str(BENCH))
    model = write_tiny_model(tmp_path / "model", base_vocab=64, seed=3)
    engine = Engine(EngineConfig(model_dir=str(model), max_rows=8))
    requests = [
        GenerationRequest(f"r{i}", (1, 2, 3 + i), beam_width=2, n=2, max_new_tokens=3)
        for i in range(2)
    ]
    with tracing.host_clock(engine, "tiny", len(requests)):
        for request in requests:
            engine.submit(request)
        done = []
        while len(done) < len(requests):
            done += engine.step()
    report = capsys.readouterr().out
    assert "--- host clock tiny:" in report and "over 2" in report
    for phase in ("admit", "prefill", "finish"):
        assert f"  {phase} " in report, report
    assert "allocator: num_device_alloc" in report
    # The wrappers are the instance's own attributes while the block runs, gone after it.
    assert "_prefill" not in vars(engine)
    assert "admit" not in vars(engine.scheduler)
