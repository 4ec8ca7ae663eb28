"""`Engine.step(intake, emit)`: what the intake submits is admitted and prefilled in that same
step; a finished request reaches `emit` mid-step, before the step admits (so a server's client
can answer back in time for the next step), and the step returns nothing of what it emitted."""

from __future__ import annotations

from tests.services.decoder.conftest import SidModel
from widebeam.services.decoder.requests.results import RequestOutput
from widebeam.services.decoder.requests.spec import GenerationRequest


def _request(rid: str, first: int, tokens: int = 3) -> GenerationRequest:
    return GenerationRequest(rid, (first, 2), beam_width=4, n=2, max_new_tokens=tokens,
                             ignore_eos=True)  # fmt: skip


def test_requests_submitted_by_the_intake_join_the_step(sid_model: SidModel) -> None:
    engine = sid_model.engine()
    engine.submit(_request("early", 1))
    engine.step(intake=lambda: engine.submit(_request("late", 4)))
    assert engine.step_counts.prefill_forwards == 1
    assert engine.step_counts.prefilled_requests == 2
    assert {s.request_id for s in engine.scheduler.running} == {"early", "late"}
    outputs = []
    while engine.has_unfinished():
        outputs += engine.step()
    assert sorted(out.request_id for out in outputs) == ["early", "late"]
    assert all(out.error is None and len(out.beams) == 2 for out in outputs)


def test_finished_requests_are_emitted_before_the_step_admits(sid_model: SidModel) -> None:
    engine = sid_model.engine(overlap_scheduling=True)
    engine.submit(_request("short", 1, tokens=2))
    engine.submit(_request("long", 3, tokens=6))
    events: list[str] = []

    def emit(out: RequestOutput) -> None:
        assert out.error is None and len(out.beams) == 2
        events.append(f"emit {out.request_id}")

    def intake() -> None:
        events.append("intake")

    while engine.has_unfinished():
        assert engine.step(intake, emit) == []  # all of it went to emit
        events.append("end of step")
    assert sorted(e for e in events if e.startswith("emit")) == ["emit long", "emit short"]
    # "short" finished in a step that went on to admit and decode "long": emitted at that
    # step's start, before its admission, not at its end
    short = events.index("emit short")
    assert events[short - 1 : short + 2] == ["end of step", "emit short", "intake"], events
    assert events.index("emit long") > short + 2
