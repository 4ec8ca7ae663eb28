"""Batched admission (`admission_ratio`) through the engine: requests arriving one per step while
others run are held back and prefilled together, in fewer forwards, and every answer is the
same as with admission at every step."""

from __future__ import annotations

import pytest

from tests.services.decoder.conftest import SidModel
from widebeam.services.decoder.engine import Engine
from widebeam.services.decoder.requests.results import RequestOutput
from widebeam.services.decoder.requests.spec import GenerationRequest


def _request(i: int) -> GenerationRequest:
    return GenerationRequest(f"r{i}", (1 + i, 2, 3 + i), beam_width=4, n=3, max_new_tokens=4,
                             ignore_eos=True)  # fmt: skip


def _run(engine: Engine) -> dict[str, RequestOutput]:
    """Four requests at once, then one more at each of the next four steps (a server's next
    requests trickling in while the first ones run); every answer by request id."""
    for i in range(4):
        engine.submit(_request(i))
    outputs = engine.step()
    for i in range(4, 8):
        arrived = [_request(i)]
        # An intake submits what arrived since its last call (a step may call it twice).
        outputs += engine.step(intake=lambda a=arrived: [engine.submit(a.pop()) for _ in a[:]])
    while engine.has_unfinished():
        outputs += engine.step()
    return {out.request_id: out for out in outputs}


def test_arrivals_during_a_run_share_prefills_and_get_the_same_answers(
    sid_model: SidModel,
) -> None:
    at_every_step = sid_model.engine(max_rows=64)
    batched = sid_model.engine(max_rows=64, admission_ratio=1.0, admission_max_wait_steps=3)
    expected, got = _run(at_every_step), _run(batched)
    assert sorted(got) == [f"r{i}" for i in range(8)]
    for rid, out in expected.items():  # as batching invariance has it: other batch shapes
        assert out.error is None and got[rid].error is None  # may move the last float bits
        assert [b.output_ids for b in got[rid].beams] == [b.output_ids for b in out.beams], rid
        for a, b in zip(got[rid].beams, out.beams, strict=True):
            assert a.score == pytest.approx(b.score, abs=1e-4)
    # one prefill per arrival at every step; held back, the four arrivals share fewer
    assert at_every_step.step_counts.prefill_forwards == 5
    assert batched.step_counts.prefill_forwards < 5
    assert batched.step_counts.prefilled_requests == 8
