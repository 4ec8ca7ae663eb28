"""`group_wait_s`: after k answers left together, the next intake waits (at most that long, once
per group) until k requests have arrived since, so a closed loop's next requests, which come
back apart, are prefilled together. What the tests assert does not depend on the machine's
speed: each bound is either generous (a wait that must end early ends by arrivals or an abort)
or must be waited out in full (too few arrivals)."""

from __future__ import annotations

import asyncio

import pytest

from tests.services.decoder.conftest import SidModel
from widebeam.services.decoder.config import EngineConfig
from widebeam.services.decoder.engine import Engine
from widebeam.services.decoder.requests.spec import GenerationRequest
from widebeam.services.decoder.server.async_engine import AsyncEngine

GENEROUS_S = 60.0  # a bound no wait in these tests may reach
GROUP = 3


def _request(rid: str, first: int) -> GenerationRequest:
    return GenerationRequest(rid, (first, 2, 3), beam_width=4, n=2, max_new_tokens=4,
                             ignore_eos=True)  # fmt: skip


def _async_engine(sid_model: SidModel, wait_s: float, early: bool = False) -> AsyncEngine:
    engine = Engine(EngineConfig(model_dir=str(sid_model.model_dir), max_rows=16,
                                 max_kv_slots=4096))  # fmt: skip
    return AsyncEngine(engine, max_waiting=8, group_wait_s=wait_s, answers_at_step_start=early)


async def _answer_a_group(async_engine: AsyncEngine) -> None:
    """GROUP requests queued before the engine thread starts: one prefill, answered together."""
    first = [
        asyncio.ensure_future(async_engine.generate(_request(f"g{i}", 1 + i), timeout=60))
        for i in range(GROUP)
    ]
    while len(async_engine._inbox) < GROUP:  # generate() queues each before its first await
        await asyncio.sleep(0.001)
    async_engine.start()
    outputs = await asyncio.gather(*first)
    assert all(len(out.beams) == 2 for out in outputs)
    counts = async_engine.engine.step_counts
    assert (counts.prefill_forwards, counts.prefilled_requests) == (1, GROUP)


@pytest.mark.parametrize("early", [False, True])
def test_a_groups_next_requests_are_prefilled_together(sid_model: SidModel, early: bool) -> None:
    async_engine = _async_engine(sid_model, GENEROUS_S, early)
    counts = async_engine.engine.step_counts

    async def scenario() -> None:
        await _answer_a_group(async_engine)
        # the next requests arrive apart, as a closed loop's do
        later = []
        for i in range(GROUP):
            request = _request(f"n{i}", 9 + i)
            later.append(asyncio.ensure_future(async_engine.generate(request, timeout=60)))
            await asyncio.sleep(0.05)
        outputs = await asyncio.gather(*later)
        assert all(len(out.beams) == 2 for out in outputs)

    try:
        asyncio.run(scenario())
    finally:
        async_engine.stop()
    assert (counts.prefill_forwards, counts.prefilled_requests) == (2, 2 * GROUP)
    # 0 where all had arrived before the intake; with early answers the last group's intake
    # waits too, inside its step, until the stop ends it
    assert counts.group_waits <= (2 if early else 1)
    assert counts.group_wait_seconds < GENEROUS_S  # ended by arrivals or the stop, not the bound


def _a_group_then_one(async_engine: AsyncEngine) -> None:
    """A group answered together, then one request alone; the engine stopped after."""

    async def scenario() -> None:
        await _answer_a_group(async_engine)
        out = await async_engine.generate(_request("alone", 9), timeout=60)
        assert len(out.beams) == 2

    try:
        asyncio.run(scenario())
    finally:
        async_engine.stop()


def test_too_few_arrivals_wait_out_the_bound_then_run(sid_model: SidModel) -> None:
    bound = 0.2
    async_engine = _async_engine(sid_model, bound)
    counts = async_engine.engine.step_counts
    _a_group_then_one(async_engine)
    assert counts.group_waits == 1  # one arrival of the three answered together
    assert counts.group_wait_seconds >= bound
    assert counts.prefilled_requests == GROUP + 1


def test_answers_that_left_alone_wait_for_nothing(sid_model: SidModel) -> None:
    async_engine = _async_engine(sid_model, GENEROUS_S)

    async def scenario() -> None:
        async_engine.start()
        for i in range(3):  # one at a time: each group is one answer, each next request one
            out = await async_engine.generate(_request(f"s{i}", 1 + i), timeout=30)
            assert len(out.beams) == 2

    try:
        asyncio.run(scenario())
    finally:
        async_engine.stop()
    assert async_engine.engine.step_counts.group_waits == 0


def test_an_abort_ends_the_wait(sid_model: SidModel) -> None:
    async_engine = _async_engine(sid_model, GENEROUS_S)
    counts = async_engine.engine.step_counts

    async def scenario() -> None:
        await _answer_a_group(async_engine)
        with pytest.raises(TimeoutError):  # the caller gives up: its request is aborted
            await async_engine.generate(_request("gives-up", 9), timeout=0.2)
        out = await async_engine.generate(_request("next", 10), timeout=30)
        assert len(out.beams) == 2  # the loop goes on

    try:
        asyncio.run(scenario())
    finally:
        async_engine.stop()
    assert counts.group_wait_seconds < GENEROUS_S
    assert async_engine.engine.scheduler.rows_in_use == 0


def test_off_never_waits(sid_model: SidModel) -> None:
    async_engine = _async_engine(sid_model, 0.0)
    _a_group_then_one(async_engine)
    assert async_engine.engine.step_counts.group_waits == 0


@pytest.mark.parametrize("bad", [-0.001, float("inf"), float("nan")])
def test_a_bad_bound_is_refused(sid_model: SidModel, bad: float) -> None:
    with pytest.raises(ValueError, match="group_wait_s must be a finite number >= 0"):
        _async_engine(sid_model, bad)
