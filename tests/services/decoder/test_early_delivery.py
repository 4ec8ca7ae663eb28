"""`Engine.step(deliver=...)`: the answers a step's start resolves reach `deliver` while that
step still runs (a server's caller can send its next request meanwhile): once its decode is
launched (with `answers_after_launch`, the default), or before its intake and forwards; the
step still returns them with the rest. Without overlap scheduling nothing is resolved at a
step's start, so nothing is delivered early. A server with `answers_at_step_start` settles its
callers from there; without it, when the step returns."""

from __future__ import annotations

import asyncio

import pytest

from tests.services.decoder.conftest import SidModel
from widebeam.services.decoder.config import EngineConfig
from widebeam.services.decoder.engine import Engine
from widebeam.services.decoder.requests.results import RequestOutput
from widebeam.services.decoder.requests.spec import GenerationRequest
from widebeam.services.decoder.server.async_engine import AsyncEngine


def _request(rid: str, first: int, tokens: int) -> GenerationRequest:
    return GenerationRequest(rid, (first, 2, 3), beam_width=4, n=2, max_new_tokens=tokens,
                             ignore_eos=True)  # fmt: skip


def _engine(sid_model: SidModel, overlap: bool, after_launch: bool = True) -> Engine:
    return Engine(EngineConfig(model_dir=str(sid_model.model_dir), max_rows=16,
                               max_kv_slots=4096, overlap_scheduling=overlap,
                               answers_after_launch=after_launch))  # fmt: skip


@pytest.mark.parametrize(("overlap", "after_launch"), [(True, True), (True, False), (False, True)])
def test_answers_are_delivered_before_the_step_ends(
    sid_model: SidModel, overlap: bool, after_launch: bool
) -> None:
    engine = _engine(sid_model, overlap, after_launch)
    engine.submit(_request("short", 1, 2))
    engine.submit(_request("long", 5, 6))
    events: list[tuple[str, tuple[str, ...]]] = []
    returned: list[RequestOutput] = []
    while engine.has_unfinished():
        events.append(("step", ()))
        out = engine.step(
            intake=lambda: events.append(("intake", ())),
            deliver=lambda outs: events.append(("deliver", tuple(o.request_id for o in outs))),
        )
        returned += out
        events.append(("returned", tuple(o.request_id for o in out)))
    delivered = [ids for kind, ids in events if kind == "deliver"]
    assert sorted(o.request_id for o in returned) == ["long", "short"]
    if not overlap:
        assert delivered == []  # resolved at the step's end: returned, nothing early
        return
    assert sorted(rid for ids in delivered for rid in ids) == ["long", "short"]
    for ids in delivered:  # inside its step, which returns it too
        at = events.index(("deliver", ids))
        step = max(i for i, event in enumerate(events[:at]) if event[0] == "step")
        if after_launch:  # after the step's intake (its decode comes after that)
            assert ("intake", ()) in events[step:at]
        else:  # before the step's intake
            assert events[at + 1] == ("intake", ())
        returned_ids = next(i for k, i in events[at:] if k == "returned")
        assert set(ids) <= set(returned_ids)


@pytest.mark.parametrize("early", [True, False])
def test_a_server_settles_answers_where_its_setting_says(sid_model: SidModel, early: bool) -> None:
    engine = _engine(sid_model, overlap=True)
    async_engine = AsyncEngine(engine, max_waiting=8, answers_at_step_start=early)
    inside_step = [False]
    settled: list[tuple[bool, int]] = []  # (inside a step, answers settled by that call)
    real_step, real_deliver = engine.step, async_engine._deliver

    def step(*args: object, **kwargs: object) -> list[RequestOutput]:
        inside_step[0] = True
        try:
            return real_step(*args, **kwargs)  # type: ignore[arg-type]
        finally:
            inside_step[0] = False

    def deliver(outputs: list[RequestOutput]) -> None:
        before = len(async_engine._jobs)
        real_deliver(outputs)
        settled.append((inside_step[0], before - len(async_engine._jobs)))

    engine.step = step  # type: ignore[method-assign]
    async_engine._deliver = deliver  # type: ignore[method-assign]

    async def scenario() -> None:
        async_engine.start()
        outputs = await asyncio.gather(
            async_engine.generate(_request("s", 1, 2), timeout=60),
            async_engine.generate(_request("l", 5, 8), timeout=60),
        )
        assert all(len(out.beams) == 2 for out in outputs)

    try:
        asyncio.run(scenario())
    finally:
        async_engine.stop()
    inside = sum(n for was_inside, n in settled if was_inside)
    after = sum(n for was_inside, n in settled if not was_inside)
    # early: both mid-step, none again once the step returns; otherwise both after it
    assert (inside, after) == ((2, 0) if early else (0, 2))
    assert async_engine._jobs == {}
