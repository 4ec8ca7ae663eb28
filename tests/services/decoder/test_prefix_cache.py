"""The prompt-prefix cache changes no answer: the same requests give the same sequences, items
and scores with the cache on and off — prefix hits, partial hits, eviction under a small KV
budget, concurrent requests sharing a prefix, beam, greedy and constrained requests.

Scores are compared to 1e-5, not bit for bit: a hit prefills fewer tokens, and an fp32 GEMM's
rounding of a row can depend on how many rows it multiplies (CPU: at a few rows), the same
rounding that batching requests together already has (`test_batching_invariance.py`). The KV a
hit reads is bit-identical to what the prompt's own prefill writes."""

from __future__ import annotations

import random

import pytest

from tests.services.decoder.conftest import SidModel
from widebeam.services.decoder.engine import Engine
from widebeam.services.decoder.requests.results import RequestOutput
from widebeam.services.decoder.requests.spec import GenerationRequest

SHARED = tuple(random.Random(5).randrange(200) for _ in range(40))  # 2.5 pages of 16


def _requests(begin: int, seed: int, count: int) -> list[GenerationRequest]:
    """Prompts that share SHARED (whole, or its first page only), or nothing."""
    rng = random.Random(seed)
    requests = []
    for i in range(count):
        head = (SHARED, SHARED[:16], ())[i % 3]
        tail = tuple(rng.randrange(200) for _ in range(rng.randint(1, 24)))
        prompt = head + tail
        if i % 4 == 3:
            sid = (*prompt, begin)
            requests.append(
                GenerationRequest(
                    f"sid{i}", sid, beam_width=8, n=4, max_new_tokens=5, constrained=True
                )
            )
        elif i % 4 == 2:
            requests.append(GenerationRequest(f"greedy{i}", prompt, max_new_tokens=4))
        else:
            requests.append(
                GenerationRequest(f"beam{i}", prompt, beam_width=4, n=2, max_new_tokens=4)
            )
    return requests


def _one_by_one(engine: Engine, requests: list[GenerationRequest]) -> list[RequestOutput]:
    return [engine.generate([req])[0] for req in requests]


def _same_answers(a: list[RequestOutput], b: list[RequestOutput]) -> None:
    for x, y in zip(a, b, strict=True):
        assert x.error is None and y.error is None, (x.error, y.error)
        assert [r.output_ids for r in x.beams] == [r.output_ids for r in y.beams], x.request_id
        assert [r.item_ids for r in x.beams] == [r.item_ids for r in y.beams]
        for r, s in zip(x.beams, y.beams, strict=True):
            assert r.score == pytest.approx(s.score, abs=1e-5)


def test_hits_and_partial_hits_give_the_same_answers(sid_model: SidModel) -> None:
    cached, plain = sid_model.engine(), sid_model.engine(prefix_cache=False)
    requests = _requests(cached.sid_layout.begin_token_id, seed=1, count=12)
    _same_answers(_one_by_one(cached, requests), _one_by_one(plain, requests))
    stats = cached.scheduler.kv.stats()
    # SHARED's 2 full pages after its first request, its first page after the first short one
    assert stats.hit_tokens >= 16 * (2 * 3 + 3) and 0 < stats.hit_ratio < 1
    assert plain.scheduler.kv.stats().hit_tokens == 0


def test_eviction_under_a_small_kv_budget(sid_model: SidModel) -> None:
    # 20 pages: cached prefixes must be evicted for later requests to be admitted at all.
    cached = sid_model.engine(max_kv_slots=320)
    plain = sid_model.engine(max_kv_slots=320, prefix_cache=False)
    requests = _requests(cached.sid_layout.begin_token_id, seed=2, count=9)
    rng = random.Random(3)
    for i in range(12):  # prompts of ~4 pages with nothing in common
        prompt = tuple(rng.randrange(200) for _ in range(64))
        requests.insert(i, GenerationRequest(f"long{i}", prompt, beam_width=4, max_new_tokens=3))
    _same_answers(_one_by_one(cached, requests), _one_by_one(plain, requests))
    stats = cached.scheduler.kv.stats()
    assert stats.hit_tokens > 0 and stats.evicted_pages > 0
    tree = cached.scheduler.kv.tree
    assert tree.num_nodes <= 20 and tree.unheld == tree.num_nodes  # nothing running holds one
    assert cached.stats().kv_slots_free == 320  # every page free or evictable again


def test_concurrent_requests_sharing_a_prefix(sid_model: SidModel) -> None:
    """Submitted together: later ones in the same admission read pages the first ones write in
    the same prefill; queued ones (max_rows) read them from the cache."""
    for max_rows in (4096, 12):
        cached = sid_model.engine(max_rows=max_rows)
        plain = sid_model.engine(max_rows=max_rows, prefix_cache=False)
        requests = _requests(cached.sid_layout.begin_token_id, seed=4, count=12)
        _same_answers(cached.generate(requests), plain.generate(requests))
        assert cached.scheduler.kv.stats().hit_tokens > 0
        assert cached.scheduler.kv.tree.unheld == cached.scheduler.kv.tree.num_nodes


def test_batched_equals_alone_with_the_cache(sid_model: SidModel) -> None:
    engine = sid_model.engine(max_rows=40)
    requests = _requests(engine.sid_layout.begin_token_id, seed=6, count=12)
    together = engine.generate(requests)
    _same_answers(_one_by_one(engine, requests), together)


def test_an_aborted_request_gives_its_prefix_pages_back(sid_model: SidModel) -> None:
    engine = sid_model.engine(max_kv_slots=320)
    prompt = (*SHARED, 7, 8, 9)
    engine.submit(GenerationRequest("a", prompt, beam_width=4, max_new_tokens=5))
    engine.step()
    kv = engine.scheduler.kv
    assert kv.tree.num_nodes == 2 and kv.tree.unheld == 0  # held while it runs
    assert engine.abort("a")
    assert kv.tree.unheld == 2 and engine.stats().kv_slots_free == 320
    [again] = engine.generate([GenerationRequest("b", prompt, beam_width=4, max_new_tokens=5)])
    [fresh] = sid_model.engine(prefix_cache=False).generate(
        [GenerationRequest("b", prompt, beam_width=4, max_new_tokens=5)]
    )
    _same_answers([again], [fresh])
    assert kv.stats().hit_tokens == 32


def test_each_answer_says_how_much_of_its_prompt_was_cached(sid_model: SidModel) -> None:
    engine = sid_model.engine()
    prompt = (*SHARED, 7, 8, 9)  # 43 tokens: 2 full pages of 16 can be cached
    first, second = (
        engine.generate([GenerationRequest(rid, prompt, beam_width=4, max_new_tokens=3)])[0]
        for rid in ("first", "second")
    )
    assert (first.prompt_tokens, first.cached_prompt_tokens) == (43, 0)
    assert (second.prompt_tokens, second.cached_prompt_tokens) == (43, 32)
    [off] = sid_model.engine(prefix_cache=False).generate(
        [GenerationRequest("off", prompt, beam_width=4, max_new_tokens=3)]
    )
    assert off.cached_prompt_tokens == 0
