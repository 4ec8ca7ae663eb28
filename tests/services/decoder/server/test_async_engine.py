"""The engine thread survives engine failures; only the affected requests fail."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import torch

from tests.services.decoder.conftest import SidModel
from widebeam.services.decoder.config import EngineConfig
from widebeam.services.decoder.engine import Engine
from widebeam.services.decoder.requests.spec import GenerationRequest, RequestError
from widebeam.services.decoder.server.async_engine import AsyncEngine
from widebeam.services.decoder.server.async_types import EngineFailure, ShuttingDown


@pytest.fixture
def engine(sid_model: SidModel) -> Engine:
    return Engine(EngineConfig(model_dir=str(sid_model.model_dir), max_rows=16, max_kv_slots=4096))


def request(**fields: object) -> GenerationRequest:
    return GenerationRequest(**({"request_id": "x", "input_ids": (1, 2), "beam_width": 4} | fields))


def test_failed_step_fails_its_requests_and_the_loop_survives(engine: Engine) -> None:
    real_prefill = engine.runner.prefill
    failures = iter([True])

    def flaky_prefill(*args: Any) -> torch.Tensor:  # fault injection: the first forward raises
        if next(failures, False):
            raise RuntimeError("device fell over")
        return real_prefill(*args)

    engine.runner.prefill = flaky_prefill  # type: ignore[method-assign]

    async def scenario() -> None:
        async_engine = AsyncEngine(engine, max_waiting=8).start()
        try:
            with pytest.raises(EngineFailure, match="device fell over"):
                await async_engine.generate(request(), timeout=30)
            assert engine.scheduler.rows_in_use == 0
            out = await async_engine.generate(request(n=2), timeout=30)
            assert len(out.beams) == 2
            assert async_engine.step_failures == 1
        finally:
            async_engine.stop()

    asyncio.run(scenario())


def test_request_errors_and_shutdown(engine: Engine) -> None:
    async def scenario() -> None:
        async_engine = AsyncEngine(engine, max_waiting=8).start()
        with pytest.raises(RequestError, match="n must be in"):
            await async_engine.generate(request(n=9), timeout=30)
        long = async_engine.generate(request(max_new_tokens=500, ignore_eos=True), timeout=30)
        task = asyncio.ensure_future(long)
        await asyncio.sleep(0.2)
        await asyncio.to_thread(async_engine.stop)
        with pytest.raises(ShuttingDown):
            await task
        with pytest.raises(ShuttingDown):
            await async_engine.generate(request(), timeout=30)
        assert engine.scheduler.rows_in_use == 0

    asyncio.run(scenario())
