"""`bench/harness.rehearse`: a timed phase's pattern run once before it is timed, with ids no
timed or warm-up request of a bench uses."""

from __future__ import annotations

from pathlib import Path

from tests.bench.smoke import load_bench_module
from widebeam.services.decoder.config import EngineConfig
from widebeam.services.decoder.engine import Engine
from widebeam.services.decoder.requests.spec import GenerationRequest
from widebeam.services.decoder.testing.tiny_model import write_tiny_model


def test_rehearse_runs_the_phase_in_a_closed_loop_of_its_concurrency(tmp_path: Path) -> None:
    harness = load_bench_module("harness")
    model = write_tiny_model(tmp_path / "model", base_vocab=64, seed=3)
    engine = Engine(EngineConfig(model_dir=str(model), max_rows=16))
    made: list[int] = []

    def make(i: int) -> GenerationRequest:
        made.append(i)
        return GenerationRequest(f"r{i}", (1, 2, 3 + i % 7), beam_width=2, n=2, max_new_tokens=3)

    harness.rehearse(engine, make, 5, 2)
    assert made == [harness.REHEARSAL_IDS - i for i in range(5)]
    assert max(made) < -1000  # below the benches' warm-up ids (-1, -100 - ...)
    counts = engine.step_counts
    assert counts.prefilled_requests == 5
    assert counts.prefill_forwards >= 3  # never more than 2 requests in flight
