"""`admit_before_flags`: overlap scheduling admits a waiting queue that fits whole before it reads
the previous step's stop flags, so that queue's prefill is on the device while the host reads
flags and builds answers; a queue that fits only once finished requests release their rows
waits for the flags and is still admitted in that step. Without it every admission waits for
the flags (the intake runs before them too). Either way the answers are the ones synchronous
scheduling gives, bit for bit."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import pytest

from tests.services.decoder.conftest import SidModel
from tests.services.decoder.digest import digest
from widebeam.services.decoder.engine import Engine
from widebeam.services.decoder.requests.results import RequestOutput
from widebeam.services.decoder.requests.spec import GenerationRequest


def _request(rid: str, first: int, tokens: int, k: int = 4) -> GenerationRequest:
    return GenerationRequest(rid, (first, 2, 3, first + 1), beam_width=k, n=2,
                             max_new_tokens=tokens, ignore_eos=True)  # fmt: skip


class PhaseLog:
    """`Engine.annotate` stand-in: the phases each step went through, in order."""

    def __init__(self, engine: Engine) -> None:
        self.steps: list[list[str]] = []
        engine.annotate = self.annotate

    @contextlib.contextmanager
    def annotate(self, phase: str) -> Iterator[None]:
        if phase == "engine.step":
            self.steps.append([])
        else:
            self.steps[-1].append(phase.removeprefix("engine."))
        yield


def _inbox(engine: Engine, arrived: list[GenerationRequest]) -> Callable[[], None]:
    def intake() -> None:
        while arrived:
            engine.submit(arrived.pop(0))

    return intake


def _drive(engine: Engine, arrivals: dict[int, list[GenerationRequest]]) -> list[RequestOutput]:
    """Step until idle; `arrivals[s]` reach the intake of step s (a server's inbox: each call
    takes what arrived since the last)."""
    outputs: list[RequestOutput] = []
    step = 0
    while engine.has_unfinished() or any(s >= step for s in arrivals):
        outputs += engine.step(intake=_inbox(engine, list(arrivals.get(step, []))))
        step += 1
    return outputs


def test_a_queue_that_fits_is_prefilled_before_the_flags_are_read(sid_model: SidModel) -> None:
    engine = sid_model.engine(max_rows=16, admit_before_flags=True)
    log = PhaseLog(engine)
    _drive(engine, {0: [_request("first", 1, 5)], 2: [_request("second", 7, 3)]})
    admitting = log.steps[2]  # "first" runs, its flags of step 1 are pending
    assert admitting.index("prefill") < admitting.index("wait_flags")
    assert admitting.count("intake") == 1  # admitted at once: no second intake
    assert engine.step_counts.prefill_forwards == 2


def test_a_queue_that_needs_released_rows_waits_for_the_flags(sid_model: SidModel) -> None:
    # "second" fits only once "first" is done
    engine = sid_model.engine(max_rows=8, admit_before_flags=True)
    log = PhaseLog(engine)
    outputs = _drive(engine, {0: [_request("first", 1, 4, k=8)], 1: [_request("second", 7, 3)]})
    assert sorted(out.request_id for out in outputs) == ["first", "second"]
    admitting = [p for p in log.steps[1:] if "prefill" in p]
    assert len(admitting) == 1 and log.steps[1].count("intake") == 2  # held while "first" runs
    phases = admitting[0]
    assert phases.index("wait_flags") < phases.index("prefill")
    assert phases.count("intake") == 2  # before the flags, and again after them
    assert engine.step_counts.prefill_forwards == 2


def test_without_it_admission_waits_for_the_flags(sid_model: SidModel) -> None:
    engine = sid_model.engine(max_rows=16, admit_before_flags=False)
    log = PhaseLog(engine)
    _drive(engine, {0: [_request("first", 1, 5)], 2: [_request("second", 7, 3)]})
    admitting = log.steps[2]
    assert admitting.count("intake") == 2  # before the flags, and again after them
    assert admitting.index("intake") < admitting.index("wait_flags") < admitting.index("prefill")
    assert engine.step_counts.prefill_forwards == 2


@pytest.mark.parametrize("max_rows", [64, 12])
def test_answers_are_those_of_synchronous_scheduling(sid_model: SidModel, max_rows: int) -> None:
    """Arrivals trickle in while others run; with 12 rows some must wait for released ones."""
    arrivals = {
        0: [_request("a", 1, 6), _request("b", 2, 3)],
        1: [_request("c", 3, 4)],
        2: [_request("d", 4, 2), _request("e", 5, 5)],
        4: [_request("f", 6, 3)],
        5: [_request("g", 8, 4), _request("h", 9, 2)],
    }
    runs = {}
    for overlap in (False, True):
        engine = sid_model.engine(
            max_rows=max_rows, overlap_scheduling=overlap, admit_before_flags=overlap
        )
        log = PhaseLog(engine)
        outputs = sorted(_drive(engine, arrivals), key=lambda out: out.request_id)
        assert [out.request_id for out in outputs] == list("abcdefgh")
        assert all(out.error is None for out in outputs)
        # (synchronous scheduling reads a step's own flags at its end: never "early")
        early = sum(1 for p in log.steps if "prefill" in p and "wait_flags" in p
                    and p.index("prefill") < p.index("wait_flags"))  # fmt: skip
        runs[overlap] = (digest(outputs), engine.step_counts.prefill_forwards, early)
    assert runs[True][:2] == runs[False][:2]  # the same answers, from the same prefills
    assert runs[True][2] > 0  # some were admitted before the flags
