"""The deadline rule learns how late requests finish against their predictions: each request
admitted beside other work feeds `AsyncEngine.calibration` with the time it took (its deadline
when that aborted it), a request that runs alone feeds nothing, and once recent requests
finished far later than predicted, a request whose prediction alone fits its deadline is
refused at arrival. Steps are timed by a clock that advances half a second a reading and
requests by one that advances 50 s a reading, so nothing depends on the machine's speed; the
engine thread is held inside a step while requests arrive, so what they join is known."""

from __future__ import annotations

import asyncio
import itertools
import threading

import pytest

from tests.services.decoder.conftest import SidModel
from widebeam.services.decoder.config import EngineConfig
from widebeam.services.decoder.engine import Engine
from widebeam.services.decoder.requests.spec import GenerationRequest
from widebeam.services.decoder.scheduler.finish_calibration import FinishCalibration
from widebeam.services.decoder.server.async_engine import AsyncEngine
from widebeam.services.decoder.server.async_types import Overloaded, RequestWork

ROWS = 16
GENEROUS_S = 60.0


def _request(rid: str, beam_width: int, tokens: int) -> GenerationRequest:
    return GenerationRequest(rid, (5, 6, 7), beam_width=beam_width, n=1, max_new_tokens=tokens,
                             ignore_eos=True)  # fmt: skip


class EngineHold:
    """Holds the engine thread in its next intake (mid-step: the engine must be running a
    request) until released."""

    def __init__(self, async_engine: AsyncEngine) -> None:
        self.requested = threading.Event()
        self.held = threading.Event()
        self.release = threading.Event()
        real_intake = async_engine._intake

        def intake() -> None:
            if self.requested.is_set():
                self.requested.clear()
                self.held.set()
                assert self.release.wait(GENEROUS_S)
            real_intake()

        async_engine._intake = intake  # type: ignore[method-assign]

    async def hold(self) -> None:
        self.held.clear()
        self.release.clear()
        self.requested.set()
        loop = asyncio.get_running_loop()
        assert await loop.run_in_executor(None, self.held.wait, GENEROUS_S)

    def let_go(self) -> None:
        self.release.set()


def test_requests_that_finish_late_make_the_deadline_rule_stricter(sid_model: SidModel) -> None:
    engine = Engine(EngineConfig(model_dir=str(sid_model.model_dir), max_rows=ROWS,
                                 max_kv_slots=4096))  # fmt: skip
    step_ticks = itertools.count(0.0, 0.5)
    request_ticks = itertools.count(0.0, 50.0)
    calibration = FinishCalibration(min_samples=1, bounds=(0.5, 4.0))
    async_engine = AsyncEngine(
        engine, max_waiting=8, clock=lambda: next(step_ticks), calibration=calibration,
        request_clock=lambda: next(request_ticks),
    )  # fmt: skip
    engine_hold = EngineHold(async_engine)
    async_engine.start()

    async def scenario() -> None:
        # Alone on an idle engine: never shed for its deadline, so it teaches nothing.
        await async_engine.generate(_request("warm", ROWS, 4), timeout=GENEROUS_S)
        assert async_engine.meter.step_s == pytest.approx(0.5)
        assert calibration.samples == 0
        running = asyncio.ensure_future(async_engine.generate(_request("long", 2, 2000)))
        while async_engine.load().rows_in_use != 2:  # (the engine publishes after each step)
            await asyncio.sleep(0.01)
        await engine_hold.hold()  # the engine holds mid-step, "long" running
        narrow = RequestWork(2, 8)
        with async_engine._cond:
            predicted = async_engine._predict(0, narrow)
        assert predicted is not None and not predicted.alone and predicted.finish_s > 0
        # Admitted on its prediction (the factor is 1), and held past its deadline: it counts
        # with its deadline, a little later than predicted.
        deadline = predicted.finish_s * 1.05
        with pytest.raises(TimeoutError):
            await async_engine.generate(_request("late", 2, 8), timeout=deadline)
        assert calibration.samples == 1
        assert calibration.factor() == pytest.approx(1.05)
        # Answered, 50 s after it arrived by the request clock: far later than predicted.
        engine_hold.let_go()
        out = await async_engine.generate(_request("slow", 2, 8), timeout=GENEROUS_S)
        assert out.error is None and out.beams
        assert calibration.samples == 2 and calibration.factor() == 4.0
        await engine_hold.hold()
        with async_engine._cond:
            predicted = async_engine._predict(0, narrow)
        assert predicted is not None and not predicted.alone
        # Its prediction alone fits twice over; times 4 it does not: refused at arrival.
        with pytest.raises(Overloaded, match="how late recent requests finished") as shed:
            await async_engine.generate(_request("refused", 2, 8),
                                        timeout=2 * predicted.finish_s)  # fmt: skip
        assert shed.value.retry_after_s is not None and shed.value.retry_after_s >= 1
        assert calibration.samples == 2  # a refused request teaches nothing
        engine_hold.let_go()
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)

    try:
        asyncio.run(scenario())
    finally:
        engine_hold.let_go()
        async_engine.stop()
    assert engine.scheduler.rows_in_use == 0
