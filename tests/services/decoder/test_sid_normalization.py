"""`normalization="sid"`: log-probs over the SID layout's tokens (plus the first EOS) only.

The oracle is transformers' beam search on the same checkpoint with every logit outside that
set replaced by -inf before its log_softmax (a forward hook on its LM head), constrained by an
independent dict trie: same sequences, same order, scores within 1e-4 — on the dense path, the
streamed path (one sub-vocabulary GEMM per chunk) and the streamed block-ranking path.
"""

from __future__ import annotations

import dataclasses
import random

import pytest
import torch
from transformers import AutoModelForCausalLM

from tests.services.decoder.conftest import SidModel
from tests.services.decoder.hf_oracle import hf_generate, trie_prefix_fn
from tests.services.decoder.test_beam_parity_hf import _assert_same_beams
from widebeam.services.catalog.sid_layout import SidLayout
from widebeam.services.decoder.config import EngineConfig
from widebeam.services.decoder.engine import Engine
from widebeam.services.decoder.requests.spec import GenerationRequest, RequestError


def _sid_tokens(layout: SidLayout, eos: list[int]) -> list[int]:
    tokens = {t for lv in layout.levels for t in range(lv.base, lv.base + lv.size)}
    tokens |= {t for t in (layout.begin_token_id, layout.end_token_id) if t is not None}
    return sorted(tokens | set(eos[:1]))


def _requests(layout: SidLayout, seed: int) -> list[GenerationRequest]:
    rng = random.Random(seed)
    begin, requests = layout.begin_token_id, []
    for i, k in enumerate((1, 3, 8, 32)):
        prompt = [rng.randrange(200) for _ in range(rng.randint(1, 8))]
        if i % 2:
            prompt.append(begin)
        path = layout.path_length(include_begin=prompt[-1] != begin)
        eos = rng.choice([None, ()])
        requests.append(
            GenerationRequest(
                request_id=f"s{i}",
                input_ids=tuple(prompt),
                beam_width=k,
                n=rng.randint(1, k),
                max_new_tokens=path if eos == () else path + 1,
                length_penalty=rng.choice([0.0, 1.0]),
                early_stopping=rng.choice([True, False]),
                eos_token_id=eos,
                constrained=True,
                normalization="sid",
            )
        )
    return requests


@pytest.mark.parametrize("path", ["dense", "streamed", "blocks"])
def test_sid_normalization_matches_masked_transformers(sid_model: SidModel, path: str) -> None:
    engine = sid_model.engine(dense_expansion_limit=1 << 30 if path == "dense" else 0)
    if path == "blocks":
        engine.step_policy = dataclasses.replace(engine.step_policy, one_pass_limit=0)
    layout = engine.sid_layout
    requests = _requests(layout, seed=len(path))
    outputs = engine.generate(requests)
    hf_model = AutoModelForCausalLM.from_pretrained(sid_model.model_dir, dtype=torch.float32)
    hf_model.eval()
    hf_model.generation_config.eos_token_id = None
    bases = [level.base for level in layout.levels]
    vocab = hf_model.config.vocab_size
    for req, out in zip(requests, outputs, strict=True):
        assert out.error is None, (req, out.error)
        eos = list(engine.limits.default_eos_ids if req.eos_token_id is None else req.eos_token_id)
        outside = torch.full((vocab,), float("-inf"))
        outside[_sid_tokens(layout, eos)] = 0.0
        hook = hf_model.lm_head.register_forward_hook(
            lambda _m, _i, logits, mask=outside: logits + mask
        )
        try:
            prefix_fn = trie_prefix_fn(
                sid_model.catalog, bases, layout.begin_token_id, layout.end_token_id,
                req.input_ids, eos,
            )  # fmt: skip
            expected = hf_generate(hf_model, req, eos, prefix_fn)
        finally:
            hook.remove()
        assert 1 <= len(out.beams) <= len(expected), req
        _assert_same_beams(req, out.beams, expected)
        # Normalising over fewer tokens only raises a log-prob.
        full = engine.generate([dataclasses.replace(req, normalization="vocab")])[0]
        by_ids = {tuple(b.output_ids): b.cum_logprob for b in full.beams}
        for beam in out.beams:
            if tuple(beam.output_ids) in by_ids:
                assert beam.cum_logprob >= by_ids[tuple(beam.output_ids)] - 1e-6


def test_sid_normalization_needs_a_constrained_request(sid_model: SidModel) -> None:
    engine = Engine(EngineConfig(model_dir=str(sid_model.model_dir)))
    for bad, message in (
        (dict(normalization="sid"), "needs a constrained request"),
        (dict(normalization="softmax"), 'must be "vocab" or "sid"'),
    ):
        with pytest.raises(RequestError, match=message):
            engine.submit(GenerationRequest("bad", (1, 2), beam_width=2, n=2, **bad))
    assert not engine.has_unfinished()
