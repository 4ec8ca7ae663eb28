"""The engine's streamed beam expansion (hidden states -> candidates in row chunks, sparse trie
candidates) returns what the dense reference (full log-prob rows) returns, in every beam mode."""

from __future__ import annotations

import dataclasses
import random

import pytest

from tests.services.decoder.conftest import SidModel
from widebeam.services.decoder.config import EngineConfig
from widebeam.services.decoder.engine import Engine
from widebeam.services.decoder.requests.spec import GenerationRequest


def _requests(seed: int, begin: int) -> list[GenerationRequest]:
    rng = random.Random(seed)
    out = []
    for i in range(12):
        prompt = tuple(rng.randrange(200) for _ in range(rng.randint(2, 12)))
        k, max_new = rng.choice([2, 5, 16, 48]), rng.randint(4 if i % 3 == 0 else 1, 6)
        common = dict(
            beam_width=k,
            n=rng.randint(1, k),
            max_new_tokens=max_new,
            min_new_tokens=min(max_new, rng.choice([0, 0, 2])),
            length_penalty=rng.choice([1.0, 0.0, -1.5, 2.0]),
            early_stopping=rng.choice([True, False, "never"]),
            return_logprobs=True,
        )
        if i % 3 == 0:
            out.append(GenerationRequest(f"sid{i}", (*prompt, begin), constrained=True, **common))
        else:
            out.append(GenerationRequest(f"lm{i}", prompt, **common))
    return out


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("wide", [False, True])  # wide: every request ranks blocks, alone
def test_streamed_matches_dense(sid_model: SidModel, seed: int, wide: bool) -> None:
    def engine(expansion: str) -> Engine:
        built = sid_model.engine(
            beam_expansion=expansion,
            dense_expansion_limit=0,  # every beam request takes the chosen path
        )
        if wide:
            built.step_policy = dataclasses.replace(built.step_policy, one_pass_limit=0)
        return built

    dense, streamed = engine("dense"), engine("streamed")
    requests = _requests(seed, dense.sid_layout.begin_token_id)
    for want, got in zip(dense.generate(requests), streamed.generate(requests), strict=True):
        assert want.error is None and got.error is None, (want.error, got.error)
        assert [b.output_ids for b in got.beams] == [b.output_ids for b in want.beams]
        assert [b.item_ids for b in got.beams] == [b.item_ids for b in want.beams]
        for a, b in zip(got.beams, want.beams, strict=True):
            assert a.score == pytest.approx(b.score, abs=1e-4)
            assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    assert streamed.stats().rows_in_use == 0


def test_unknown_expansion_is_rejected(sid_model: SidModel) -> None:
    with pytest.raises(ValueError, match="beam_expansion must be one of"):
        EngineConfig(model_dir=str(sid_model.model_dir), beam_expansion="fast")
