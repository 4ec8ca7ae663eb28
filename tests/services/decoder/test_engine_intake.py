"""`Engine.step(intake)`: what the intake submits is admitted and prefilled in that same step."""

from __future__ import annotations

from tests.services.decoder.conftest import SidModel
from widebeam.services.decoder.requests.spec import GenerationRequest


def test_requests_submitted_by_the_intake_join_the_step(sid_model: SidModel) -> None:
    engine = sid_model.engine()
    late = GenerationRequest("late", (4, 5), beam_width=4, n=2, max_new_tokens=3,
                             ignore_eos=True)  # fmt: skip
    engine.submit(GenerationRequest("early", (1, 2), beam_width=4, n=2, max_new_tokens=3,
                                    ignore_eos=True))  # fmt: skip
    arrived = [late]  # an intake submits what arrived since its last call
    engine.step(intake=lambda: [engine.submit(arrived.pop()) for _ in arrived[:]])
    assert engine.step_counts.prefill_forwards == 1
    assert engine.step_counts.prefilled_requests == 2
    assert {s.request_id for s in engine.scheduler.running} == {"early", "late"}
    outputs = []
    while engine.has_unfinished():
        outputs += engine.step()
    assert sorted(out.request_id for out in outputs) == ["early", "late"]
    assert all(out.error is None and len(out.beams) == 2 for out in outputs)
