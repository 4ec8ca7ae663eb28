"""Lockstep beam requests advanced as one cohort return what each returns advancing alone."""

from __future__ import annotations

import random

import pytest

from tests.services.decoder.conftest import SidModel
from widebeam.services.decoder.engine import Engine
from widebeam.services.decoder.requests.results import RequestOutput
from widebeam.services.decoder.requests.spec import GenerationRequest
from widebeam.services.decoder.runner.beam_cohorts import cohort_key


def _engine(sid_model: SidModel, batched: bool) -> Engine:
    return sid_model.engine(
        batch_beam_steps=batched,
        dense_expansion_limit=0,  # every beam request streams (and so may join a cohort)
    )


def _requests(begin: int, seed: int) -> list[GenerationRequest]:
    rng = random.Random(seed)
    reqs = []
    for i in range(18):
        prompt = tuple(rng.randrange(200) for _ in range(rng.randint(1, 8)))
        group = i % 3  # three cohorts of six lockstep requests
        if group == 0:
            reqs.append(
                GenerationRequest(
                    f"sid{i}",
                    (*prompt, begin),
                    beam_width=12,
                    n=5,
                    max_new_tokens=5,
                    constrained=True,
                    return_logprobs=True,
                )
            )
        elif group == 1:
            reqs.append(
                GenerationRequest(
                    f"lm{i}",
                    prompt,
                    beam_width=6,
                    n=3,
                    max_new_tokens=6,
                    length_penalty=-0.5,
                    eos_token_id=(rng.randrange(200),),
                    early_stopping=True,
                    min_new_tokens=2,
                )
            )
        else:  # same width but different lengths: one cohort, each with its own scalars
            reqs.append(
                GenerationRequest(
                    f"mix{i}",
                    prompt,
                    beam_width=4,
                    n=4,
                    max_new_tokens=rng.randint(2, 5),
                    early_stopping="never",
                )
            )
    return reqs  # fmt: skip


def _same(a: RequestOutput, b: RequestOutput) -> None:
    assert a.error is None and b.error is None, (a.error, b.error)
    assert [x.output_ids for x in a.beams] == [x.output_ids for x in b.beams], a.request_id
    for x, y in zip(a.beams, b.beams, strict=True):
        assert x.score == pytest.approx(y.score, abs=1e-4)
        assert x.item_ids == y.item_ids
        assert (x.logprobs is None) == (y.logprobs is None)


@pytest.mark.parametrize("seed", [0, 1])
def test_cohorts_match_requests_alone(sid_model: SidModel, seed: int) -> None:
    batched, alone = _engine(sid_model, True), _engine(sid_model, False)
    requests = _requests(batched.sid_layout.begin_token_id, seed)
    for a, b in zip(batched.generate(requests), alone.generate(requests), strict=True):
        _same(a, b)
    assert batched.stats().rows_in_use == 0


def test_cohorts_form_only_for_lockstep_streamed_requests(sid_model: SidModel) -> None:
    engine = _engine(sid_model, True)
    begin = engine.sid_layout.begin_token_id
    for req in [
        GenerationRequest("a", (1, 2), beam_width=6, n=2, max_new_tokens=4),
        GenerationRequest("b", (3,), beam_width=6, n=3, max_new_tokens=4),
        GenerationRequest("c", (3,), beam_width=6, n=3, max_new_tokens=5),
        GenerationRequest("d", (4, begin), beam_width=6, n=2, max_new_tokens=4, constrained=True),
        GenerationRequest("g", (5,), max_new_tokens=4),
    ]:
        engine.submit(req)
    engine.step()  # admitted and prefilled: every search has taken its first step
    keys = {s.request_id: cohort_key(s, engine.step_policy) for s in engine.scheduler.running}
    assert keys["a"] == keys["b"]  # n only matters for the results
    assert keys["c"] == keys["a"]  # another length: a per-request scalar
    assert keys["d"] != keys["a"]  # constrained by a catalog
    assert keys["g"] is None  # greedy


def test_requests_a_step_apart_share_a_cohort(sid_model: SidModel) -> None:
    """A request that arrives while another of its width runs joins that one's cohort after its
    own first step (one hidden row per request, so a cohort of its own) and returns what it
    returns alone."""
    begin = sid_model.engine().sid_layout.begin_token_id
    first = GenerationRequest(
        "first", (4, 5, begin), beam_width=6, n=4, max_new_tokens=4, constrained=True
    )
    second = GenerationRequest(
        "second", (7, begin), beam_width=6, n=4, max_new_tokens=5, constrained=True,
        length_penalty=-0.5,
    )  # fmt: skip
    engine = _engine(sid_model, True)
    engine.submit(first)
    outputs = engine.step()  # first: prefilled (its first token), then its second
    engine.submit(second)
    before = engine.step_counts.beam_expansions
    engine.step()  # second's first step alone; first's third and second's second: one cohort
    assert engine.step_counts.beam_expansions - before == 2
    while engine.has_unfinished():
        outputs += engine.step()
    got = {out.request_id: out for out in outputs}
    alone = _engine(sid_model, True)
    for request in (first, second):
        [out] = alone.generate([request])
        _same(got[request.request_id], out)
