"""The request cycle: beam widths in turn, OpenAI calls interleaved, valid by construction."""

from __future__ import annotations

import json

import pytest

from widebeam.loadgen.traffic import RECOMMEND, TrafficSpec, build_cycle, recommend_n

ITEMS = [f"item-{i}" for i in range(50)]


def test_recommend_only_cycles_the_beam_widths() -> None:
    cycle = build_cycle(TrafficSpec(ITEMS, (1, 2, 16, 64, 256)), length=10)
    assert [c.kind for c in cycle[:5]] == [f"recommend/b{b}" for b in (1, 2, 16, 64, 256)]
    for call in cycle:
        body = json.loads(call.body)
        assert call.path == RECOMMEND and body == call.request
        assert 1 <= len(body["history"]) <= 8 and set(body["history"]) <= set(ITEMS)
        assert 1 <= body["n"] <= body["beam_width"]


def test_mixed_traffic_interleaves_completions_and_chat() -> None:
    cycle = build_cycle(TrafficSpec(ITEMS, (1, 64), mixed=True, model="m"), length=40)
    assert [c.path == RECOMMEND for c in cycle[:6]] == [True, False] * 3
    kinds = {c.kind for c in cycle}
    assert kinds >= {"completions/constrained", "completions/beam", "completions/sampled",
                     "chat/greedy", "chat/beam", "recommend/b1", "recommend/b64"}  # fmt: skip
    for call in cycle:
        if call.path != RECOMMEND:
            assert call.request["model"] == "m"
            assert call.request.get("n", 1) <= call.request.get("beam_width", 1)
            if "temperature" in call.request:
                assert "beam_width" not in call.request  # sampling is one sequence


def test_the_cycle_is_reproducible_and_needs_items() -> None:
    spec = TrafficSpec(ITEMS, (4,), seed=3)
    assert build_cycle(spec) == build_cycle(spec)
    assert [recommend_n(b) for b in (1, 4, 16, 64, 256, 1024)] == [1, 4, 4, 8, 32, 32]
    with pytest.raises(ValueError, match="item ids"):
        build_cycle(TrafficSpec([], (4,)))
