"""A request that arrives while the engine thread is inside a step joins that step's admission,
instead of waiting for the step after it (what a closed loop's next request used to do)."""

from __future__ import annotations

import asyncio
import threading

from tests.services.decoder.conftest import SidModel
from widebeam.services.decoder.config import EngineConfig
from widebeam.services.decoder.engine import Engine
from widebeam.services.decoder.requests.spec import GenerationRequest
from widebeam.services.decoder.server.async_engine import AsyncEngine


def _request(rid: str, first: int) -> GenerationRequest:
    return GenerationRequest(rid, (first, 2, 3), beam_width=4, n=2, max_new_tokens=4,
                             ignore_eos=True)  # fmt: skip


def test_a_request_sent_during_a_step_is_admitted_in_it(sid_model: SidModel) -> None:
    engine = Engine(EngineConfig(model_dir=str(sid_model.model_dir), max_rows=16,
                                 max_kv_slots=4096))  # fmt: skip
    async_engine = AsyncEngine(engine, max_waiting=8)
    in_step, sent = threading.Event(), threading.Event()
    real_intake = async_engine._intake

    def intake() -> None:  # the first step's intake holds until the second request is queued
        if not in_step.is_set():
            in_step.set()
            assert sent.wait(30)
        real_intake()

    async_engine._intake = intake  # type: ignore[method-assign]

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        first = asyncio.ensure_future(async_engine.generate(_request("a", 1), timeout=60))
        assert await loop.run_in_executor(None, in_step.wait, 30)  # the engine is mid-step
        second = asyncio.ensure_future(async_engine.generate(_request("b", 5), timeout=60))
        while not async_engine._inbox:  # generate() queues it before its first await
            await asyncio.sleep(0.001)
        sent.set()
        outputs = await asyncio.gather(first, second)
        assert all(len(out.beams) == 2 for out in outputs)

    async_engine.start()
    try:
        asyncio.run(scenario())
    finally:
        async_engine.stop()
    assert engine.step_counts.prefill_forwards == 1  # both in the first step's one prefill
    assert engine.step_counts.prefilled_requests == 2
