"""A request that joins running work and whose own run, at the step time the engine is
measured at, outlasts its deadline is refused at arrival (Overloaded, with a Retry-After),
instead of holding rows until its deadline aborts it; one whose run fits its deadline is
answered, and so is any request without a deadline. The engine's steps are timed by a clock
that advances half a second a reading, so every measured step takes 0.5 s whatever the
machine's speed; the engine thread is held inside a step while the requests arrive, so the
running work they join is known."""

from __future__ import annotations

import asyncio
import itertools
import threading

import pytest

from tests.services.decoder.conftest import SidModel
from widebeam.services.decoder.config import EngineConfig
from widebeam.services.decoder.engine import Engine
from widebeam.services.decoder.requests.spec import GenerationRequest
from widebeam.services.decoder.server.async_engine import AsyncEngine
from widebeam.services.decoder.server.async_types import Overloaded

ROWS = 16
DEADLINE_S = 20.0  # generous for the real run of the request that is admitted


def _request(rid: str, beam_width: int, tokens: int) -> GenerationRequest:
    return GenerationRequest(rid, (5, 6, 7), beam_width=beam_width, n=1, max_new_tokens=tokens,
                             ignore_eos=True)  # fmt: skip


def test_a_run_past_its_deadline_beside_running_work_is_refused_at_arrival(
    sid_model: SidModel,
) -> None:
    engine = Engine(EngineConfig(model_dir=str(sid_model.model_dir), max_rows=ROWS,
                                 max_kv_slots=4096))  # fmt: skip
    ticks = itertools.count(0.0, 0.5)
    async_engine = AsyncEngine(engine, max_waiting=8, clock=lambda: next(ticks))
    hold, paused, release = threading.Event(), threading.Event(), threading.Event()
    intakes = itertools.count()
    real_intake = async_engine._intake

    def intake() -> None:  # once held, the third intake waits (the long request runs by then)
        if hold.is_set() and next(intakes) == 2:
            paused.set()
            assert release.wait(60)
        real_intake()

    async_engine._intake = intake  # type: ignore[method-assign]
    async_engine.start()

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        await async_engine.generate(_request("warm", ROWS, 4), timeout=DEADLINE_S)
        assert async_engine.meter.step_s == pytest.approx(0.5)
        hold.set()
        running = asyncio.ensure_future(async_engine.generate(_request("long", 2, 2000)))
        assert await loop.run_in_executor(None, paused.wait, 60)
        assert async_engine.load().rows_in_use == 2
        # The other 14 rows for 128 steps: at least 32 s predicted (a step is never predicted
        # slower than the measured ones, nor faster than in proportion to its rows; a step
        # that admits runs prefill and decode rows, at most 2 x ROWS).
        with pytest.raises(Overloaded, match="its own steps at the current load") as shed:
            await async_engine.generate(_request("wide", ROWS - 2, 128), timeout=DEADLINE_S)
        assert shed.value.retry_after_s is not None and shed.value.retry_after_s >= 1
        # 2 rows for 8 steps: at most 4 s predicted, within the deadline: run and answered.
        narrow = asyncio.ensure_future(
            async_engine.generate(_request("narrow", 2, 8), timeout=DEADLINE_S)
        )
        # The same wide request without a deadline is queued, not refused.
        unbounded = asyncio.ensure_future(async_engine.generate(_request("unbounded", 12, 8)))
        release.set()
        running.cancel()  # (aborted in the engine: its rows are free at the end)
        for out in await asyncio.gather(narrow, unbounded):
            assert out.error is None and out.beams
        await asyncio.gather(running, return_exceptions=True)

    try:
        asyncio.run(scenario())
    finally:
        release.set()
        async_engine.stop()
    assert engine.scheduler.rows_in_use == 0
