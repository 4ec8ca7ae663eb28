"""Requests submitted together (mixed widths, beam + ordinary + sampled + constrained) give the
same results as each run alone: continuous batching must not change what a request computes."""

from __future__ import annotations

import random

import pytest

from tests.services.decoder.conftest import SidModel
from widebeam.services.decoder.requests.results import RequestOutput
from widebeam.services.decoder.requests.spec import GenerationRequest


def _mixed_requests(seed: int, begin: int) -> list[GenerationRequest]:
    rng = random.Random(seed)
    requests = []
    for i in range(14):
        prompt = tuple(rng.randrange(200) for _ in range(rng.randint(2, 20)))
        kind = i % 4
        if kind == 0:
            req = GenerationRequest(
                f"beam{i}",
                prompt,
                beam_width=rng.choice([2, 8, 32]),
                n=2,
                max_new_tokens=rng.randint(2, 6),
            )
        elif kind == 1:
            req = GenerationRequest(
                f"greedy{i}", prompt, max_new_tokens=rng.randint(1, 6), return_logprobs=True
            )
        elif kind == 2:
            req = GenerationRequest(
                f"sample{i}", prompt, max_new_tokens=5, temperature=0.9, top_p=0.9, top_k=20, seed=i
            )
        else:
            req = GenerationRequest(
                f"sid{i}", (*prompt, begin), beam_width=16, n=8, max_new_tokens=5, constrained=True
            )
        requests.append(req)
    return requests


def _same(a: RequestOutput, b: RequestOutput) -> None:
    assert a.error is None and b.error is None
    assert [x.output_ids for x in a.beams] == [x.output_ids for x in b.beams], a.request_id
    for x, y in zip(a.beams, b.beams, strict=True):
        assert x.score == pytest.approx(y.score, abs=1e-4)
        assert x.item_ids == y.item_ids


@pytest.mark.parametrize("max_rows", [4096, 40])
def test_batched_equals_alone(sid_model: SidModel, max_rows: int) -> None:
    """max_rows=40 forces queueing: requests join the running batch between steps."""
    engine = sid_model.engine(max_rows=max_rows)
    requests = _mixed_requests(3, engine.sid_layout.begin_token_id)
    together = engine.generate(requests)
    for req, out in zip(requests, together, strict=True):
        _same(engine.generate([req])[0], out)
