"""`answers_after_launch`: the answers of the requests a step's flags finish are built after
that step's forwards are queued (rows and KV are still released before admission), and each is
returned by the same step, equal bit for bit, as when they are built before; a caller that
takes answers early (`deliver`) gets them once the step's decode is launched, before its
selection (without the setting: at the step's start)."""

from __future__ import annotations

import pytest

from tests.services.decoder.conftest import SidModel
from tests.services.decoder.digest import digest
from tests.services.decoder.test_admission_before_flags import PhaseLog
from widebeam.services.decoder.engine import Engine
from widebeam.services.decoder.requests.results import RequestOutput
from widebeam.services.decoder.requests.spec import GenerationRequest


def _requests() -> list[GenerationRequest]:
    lengths = [2, 5, 3, 6, 4, 3, 5, 2]
    return [
        GenerationRequest(
            f"r{i}", (1 + i, 2, 3 + i), beam_width=4, n=2, max_new_tokens=t, ignore_eos=True
        )
        for i, t in enumerate(lengths)
    ]


def _run(engine: Engine) -> tuple[dict[str, int], list[RequestOutput], PhaseLog]:
    """Every request's answer and the step that returned it (12 rows: some queue for others'
    rows)."""
    log = PhaseLog(engine)
    for request in _requests():
        engine.submit(request)
    step_of: dict[str, int] = {}
    outputs: list[RequestOutput] = []
    step = 0
    while engine.has_unfinished():
        for out in engine.step():
            step_of[out.request_id] = step
            outputs.append(out)
        step += 1
    return step_of, sorted(outputs, key=lambda out: out.request_id), log


def test_answers_are_built_after_the_forwards_and_are_the_same(sid_model: SidModel) -> None:
    before_steps, before, _ = _run(sid_model.engine(max_rows=12))
    after_steps, after, log = _run(sid_model.engine(max_rows=12, answers_after_launch=True))
    assert after_steps == before_steps
    assert digest(after) == digest(before) and all(out.error is None for out in after)
    with_forwards = 0
    for step in set(after_steps.values()):  # each step that answered built them last
        phases = log.steps[step]
        forwards = [i for i, p in enumerate(phases) if p in ("decode", "prefill")]
        assert phases[-1] == "finish"
        with_forwards += bool(forwards)
        assert not forwards or max(forwards) < len(phases) - 1
    assert with_forwards >= 3  # most answers left steps that went on running others


@pytest.mark.parametrize("answers_after_launch", [False, True])
def test_a_caller_taking_answers_at_the_step_start_gets_them_there(
    sid_model: SidModel, answers_after_launch: bool
) -> None:
    engine = sid_model.engine(max_rows=12, answers_after_launch=answers_after_launch)
    log = PhaseLog(engine)
    for request in _requests():
        engine.submit(request)
    delivered: list[tuple[list[str], str]] = []  # (the step's phases so far, request)

    def deliver(outputs: list[RequestOutput]) -> None:
        delivered.extend((list(log.steps[-1]), out.request_id) for out in outputs)

    while engine.has_unfinished():
        engine.step(deliver=deliver)
    assert sorted(rid for _, rid in delivered) == [f"r{i}" for i in range(8)]
    for phases, _ in delivered:
        assert phases[-1] == "finish"  # built right before
        if not answers_after_launch:  # built and delivered before any forward of its step
            assert not {"prefill", "decode", "select"} & set(phases)
        elif "decode" in phases:  # built once the decode was launched, before its selection
            assert "select" not in phases[phases.index("decode") :]
    if answers_after_launch:  # most while a decode ran on
        assert sum("decode" in phases for phases, _ in delivered) >= 4
