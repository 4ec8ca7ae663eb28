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


def _drive_staged(
    engine: Engine, arrivals: dict[tuple[int, int], list[GenerationRequest]]
) -> tuple[list[RequestOutput], PhaseLog]:
    """Step until idle; `arrivals[step, i]` reach step's i-th intake (0: its first; 1: the one
    after its flags, or, where a step takes in once, its next step's first)."""
    log = PhaseLog(engine)
    outputs: list[RequestOutput] = []
    taken: dict[int, int] = {}  # step -> its intakes so far
    delivered: set[tuple[int, int]] = set()

    def intake() -> None:
        step = len(log.steps) - 1
        i = taken.get(step, 0)
        taken[step] = i + 1
        pending = [key for key in arrivals if key[0] <= step and key not in delivered]
        for key in sorted(pending):
            if key[0] < step or key[1] <= i:
                delivered.add(key)
                for request in arrivals[key]:
                    engine.submit(request)

    while engine.has_unfinished() or len(delivered) < len(arrivals):
        outputs += engine.step(intake=intake)
    return outputs, log


# "late" arrives while step 1 reads its flags, after "early" was admitted before them
LATE_ARRIVALS = {(0, 0): [_request("first", 1, 5)], (1, 0): [_request("early", 7, 3)],
                 (1, 1): [_request("late", 9, 4)]}  # fmt: skip


def test_intake_after_flags_admits_the_late_arrivals_in_the_same_step(
    sid_model: SidModel,
) -> None:
    engine = sid_model.engine(max_rows=32, admit_before_flags=True, intake_after_flags=True)
    outputs, log = _drive_staged(engine, LATE_ARRIVALS)
    assert sorted(out.request_id for out in outputs) == ["early", "first", "late"]
    step = log.steps[1]
    assert step.count("intake") == 2 and step.count("prefill") == 2
    flags = step.index("wait_flags")
    assert step.index("prefill") < flags < step.index("intake", step.index("intake") + 1)
    assert "prefill" in step[flags:]
    assert all("prefill" not in later for later in log.steps[2:])
    assert engine.step_counts.prefill_forwards == 3  # first, early, late: each its own


def test_without_it_the_late_arrivals_wait_a_step(sid_model: SidModel) -> None:
    engine = sid_model.engine(max_rows=32, admit_before_flags=True, intake_after_flags=False)
    outputs, log = _drive_staged(engine, LATE_ARRIVALS)
    assert sorted(out.request_id for out in outputs) == ["early", "first", "late"]
    assert log.steps[1].count("intake") == 1 and log.steps[1].count("prefill") == 1
    assert log.steps[2].count("prefill") == 1  # "late", at step 2's first intake


def _same_answers(a: list[RequestOutput], b: list[RequestOutput]) -> None:
    """The same beams and items; scores within float noise (a request's rows share forwards
    with different neighbours when it is admitted in another step)."""
    assert [out.request_id for out in a] == [out.request_id for out in b]
    for x, y in zip(a, b, strict=True):
        assert x.error is None and y.error is None
        assert [beam.output_ids for beam in x.beams] == [beam.output_ids for beam in y.beams]
        assert [beam.item_ids for beam in x.beams] == [beam.item_ids for beam in y.beams]
        for bx, by in zip(x.beams, y.beams, strict=True):
            assert bx.score == pytest.approx(by.score, abs=1e-4)


@pytest.mark.parametrize("max_rows", [64, 12])
def test_intake_after_flags_keeps_the_answers(sid_model: SidModel, max_rows: int) -> None:
    """Arrivals before and after the flags of several steps; with 12 rows some must wait for
    released ones. Whichever step admits a request, its answer is the same."""
    arrivals = {
        (0, 0): [_request("a", 1, 6), _request("b", 2, 3)],
        (1, 0): [_request("c", 3, 4)],
        (1, 1): [_request("d", 4, 2), _request("e", 5, 5)],
        (3, 1): [_request("f", 6, 3)],
        (4, 0): [_request("g", 8, 4)],
        (4, 1): [_request("h", 9, 2)],
    }
    runs = {}
    for late in (False, True):
        engine = sid_model.engine(max_rows=max_rows, intake_after_flags=late)
        outputs, _ = _drive_staged(engine, arrivals)
        runs[late] = sorted(outputs, key=lambda out: out.request_id)
        assert [out.request_id for out in runs[late]] == list("abcdefgh")
    _same_answers(runs[True], runs[False])
