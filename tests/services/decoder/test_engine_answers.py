"""A finished request's rows go back at once (admission in the same step may take them), while
its answer is built at the step's end, after the step's decode forward is queued; an answer
that cannot be built fails that request alone."""

from __future__ import annotations

import pytest

from tests.services.decoder.conftest import SidModel
from widebeam.services.decoder.engine import Engine
from widebeam.services.decoder.requests.results import RequestOutput
from widebeam.services.decoder.requests.spec import GenerationRequest
from widebeam.services.decoder.runner.request_state import RequestState


def beam(request_id: str, prompt: tuple[int, ...], tokens: int) -> GenerationRequest:
    return GenerationRequest(request_id, prompt, beam_width=4, n=4, max_new_tokens=tokens,
                             ignore_eos=True)  # fmt: skip


def run(engine: Engine) -> list[list[str]]:
    """Step until idle; each step's answered request ids."""
    answered = []
    while engine.has_unfinished():
        answered.append([out.request_id for out in engine.step()])
    return answered


def test_answers_are_built_after_the_steps_decode_is_queued(
    sid_model: SidModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = sid_model.engine(max_rows=8)  # two beam-4 requests at a time
    events: list[str] = []
    launch_decode = engine.runner.launch_decode

    def logged_launch(prepared: object) -> object:
        events.append("decode")
        return launch_decode(prepared)  # type: ignore[arg-type]

    real_output = RequestState.output

    def logged_output(state: RequestState) -> RequestOutput:
        events.append(f"answer {state.request_id}")
        return real_output(state)

    monkeypatch.setattr(engine.runner, "launch_decode", logged_launch)
    monkeypatch.setattr(RequestState, "output", logged_output)
    engine.submit(beam("short", (1, 2), 2))
    engine.submit(beam("long", (3, 4), 6))
    engine.submit(beam("waiting", (5, 6), 2))  # no rows until "short" is done
    assert engine.step() == []  # "short" and "long" prefilled and decoded
    assert engine.step_counts.prefill_forwards == 1
    events.clear()
    answered = engine.step()
    assert [out.request_id for out in answered] == ["short"]
    # "short" was found done at this step's start: "waiting" took its rows in this same step,
    # and its answer was built once the step's decode ("long", "waiting") was queued.
    assert engine.step_counts.prefill_forwards == 2
    assert events == ["decode", "answer short"], events
    rest = [out for ids in run(engine) for out in ids]
    assert sorted(rest) == ["long", "waiting"]
    assert len(answered[0].beams) == 4


def test_an_answer_that_cannot_be_built_fails_its_request_alone(
    sid_model: SidModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = sid_model.engine()
    real_output = RequestState.output

    def failing_output(state: RequestState) -> RequestOutput:
        if state.request_id == "bad":  # fault injection: one answer's building raises
            raise ValueError("item lookup fell over")
        return real_output(state)

    monkeypatch.setattr(RequestState, "output", failing_output)
    outputs = engine.generate([beam("good", (1, 2), 3), beam("bad", (3, 4), 3)])
    good, bad = outputs
    assert good.error is None and len(good.beams) == 4
    assert bad.error == "internal error: item lookup fell over" and not bad.beams
    assert engine.scheduler.rows_in_use == 0 and not engine.has_unfinished()
    [again] = engine.generate([beam("after", (5, 6), 3)])  # the engine still serves
    assert again.error is None and len(again.beams) == 4
