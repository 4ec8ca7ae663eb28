"""An answer that cannot be built (its results, its item ids) fails that request alone: the
others of its step are answered, its rows and KV go back, the engine keeps serving."""

from __future__ import annotations

import pytest

from tests.services.decoder.conftest import SidModel
from widebeam.services.decoder.requests.results import RequestOutput
from widebeam.services.decoder.requests.spec import GenerationRequest
from widebeam.services.decoder.runner.request_state import RequestState


def beam(request_id: str, prompt: tuple[int, ...], tokens: int) -> GenerationRequest:
    return GenerationRequest(request_id, prompt, beam_width=4, n=4, max_new_tokens=tokens,
                             ignore_eos=True)  # fmt: skip


@pytest.mark.parametrize("answers_after_launch", [False, True])
def test_an_answer_that_cannot_be_built_fails_its_request_alone(
    sid_model: SidModel, monkeypatch: pytest.MonkeyPatch, answers_after_launch: bool
) -> None:
    engine = sid_model.engine(answers_after_launch=answers_after_launch)
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
