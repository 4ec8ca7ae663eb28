"""Prompts whose first tokens' KV is cached. A batch that fits a prefill graph runs whole in its
bucket: it computes what a plain prefill computes, bit for bit, reads nothing of the cached
slots and writes the trash slot in their place, so prefix pages other requests share keep their
KV. A batch beyond the graphs' tokens, or with more cached tokens than a graph recomputes, runs
the eager suffix-only prefill over the cached KV."""

from __future__ import annotations

import random

import pytest
import torch

from tests.services.decoder.conftest import SidModel
from tests.services.decoder.runner.static_attention import StaticTorchAttention
from widebeam.services.decoder.kv.kv_cache import KVCache
from widebeam.services.decoder.model.transformer import CausalLM
from widebeam.services.decoder.runner.model_runner import ModelRunner
from widebeam.services.decoder.runner.prefill_graphs import MAX_RECOMPUTED_PREFIX_TOKENS

SLOTS = 160
TRASH = SLOTS - 1
_rng = random.Random(7)
PROMPTS = [tuple(_rng.randrange(3, 200) for _ in range(n)) for n in (40, 24)]
PROMPT_SLOTS = [torch.arange(0, 40), torch.arange(64, 88)]
CACHED = [32, 16]  # page-aligned prefixes, each leaving at least the last token to prefill
CACHED_SLOTS = torch.cat([s[:c] for s, c in zip(PROMPT_SLOTS, CACHED, strict=True)])
SUFFIX_SLOTS = torch.cat([s[c:] for s, c in zip(PROMPT_SLOTS, CACHED, strict=True)])


@pytest.fixture(scope="module")
def model(sid_model: SidModel) -> CausalLM:
    return CausalLM.from_pretrained(sid_model.model_dir)


def _runner(model: CausalLM, graph_tokens: int, slots: int = SLOTS) -> ModelRunner:
    mc = model.config
    cache = KVCache(
        mc.num_hidden_layers, slots, mc.num_key_value_heads, mc.head_dim, torch.float32, "cpu"
    )
    # On the CPU the bucketed (graph) path runs eagerly at the bucket's shapes.
    return ModelRunner(
        model, cache, StaticTorchAttention(), trash_slot=slots - 1, cuda_graphs=True,
        prefill_graph_tokens=graph_tokens,
    )  # fmt: skip


@pytest.fixture(scope="module")
def plain(model: CausalLM) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A plain prefill's last hidden states and the K, V it wrote."""
    runner = _runner(model, 2048)
    hidden = runner.prefill(PROMPTS, PROMPT_SLOTS)
    return hidden, runner.cache.k.clone(), runner.cache.v.clone()


def test_a_batch_that_fits_a_graph_runs_whole_and_keeps_the_cached_slots(
    model: CausalLM, plain: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
) -> None:
    want, k_plain, v_plain = plain
    runner = _runner(model, 2048)
    # Sentinels in the cached slots: read, they would change the answer; written, they go.
    runner.cache.k[:, CACHED_SLOTS] = 7.0
    runner.cache.v[:, CACHED_SLOTS] = -7.0
    got = runner.prefill(PROMPTS, PROMPT_SLOTS, cached=CACHED)
    assert torch.equal(got, want)
    assert (runner.cache.k[:, CACHED_SLOTS] == 7.0).all()
    assert (runner.cache.v[:, CACHED_SLOTS] == -7.0).all()
    assert torch.equal(runner.cache.k[:, SUFFIX_SLOTS], k_plain[:, SUFFIX_SLOTS])
    assert torch.equal(runner.cache.v[:, SUFFIX_SLOTS], v_plain[:, SUFFIX_SLOTS])
    assert runner.cache.k[:, TRASH].any()  # where the cached positions' KV went


def test_a_batch_beyond_the_graphs_reads_the_cached_kv(
    model: CausalLM, plain: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
) -> None:
    want, k_plain, v_plain = plain
    runner = _runner(model, 32)  # 64 prompt tokens: more than a prefill graph holds
    runner.cache.k[:, CACHED_SLOTS] = k_plain[:, CACHED_SLOTS]
    runner.cache.v[:, CACHED_SLOTS] = v_plain[:, CACHED_SLOTS]
    got = runner.prefill(PROMPTS, PROMPT_SLOTS, cached=CACHED)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(
        runner.cache.k[:, SUFFIX_SLOTS], k_plain[:, SUFFIX_SLOTS], rtol=1e-5, atol=1e-5
    )
    assert not runner.cache.k[:, TRASH].any()  # the suffix-only prefill pads nothing

    # And it does read them: other KV in the cached slots gives other hidden states.
    runner.cache.k[:, CACHED_SLOTS] = 7.0
    assert not torch.allclose(runner.prefill(PROMPTS, PROMPT_SLOTS, cached=CACHED), want)


def test_a_graph_sized_batch_with_many_cached_tokens_reads_them(model: CausalLM) -> None:
    """Past MAX_RECOMPUTED_PREFIX_TOKENS cached tokens the suffix-only prefill runs although the
    batch fits a graph: it reads the cached KV, writes nothing of the cached positions and
    counts as an eager prefill."""
    cached = [MAX_RECOMPUTED_PREFIX_TOKENS // 2 + 16] * 2  # page-aligned, together past the rule
    rng = random.Random(3)
    prompts = [tuple(rng.randrange(3, 200) for _ in range(c + 8)) for c in cached]
    slots = [torch.arange(0, len(prompts[0])), torch.arange(2048, 2048 + len(prompts[1]))]
    limit = 4 * MAX_RECOMPUTED_PREFIX_TOKENS  # the batch fits a graph
    cached_slots = torch.cat([s[:c] for s, c in zip(slots, cached, strict=True)])
    suffix_slots = torch.cat([s[c:] for s, c in zip(slots, cached, strict=True)])
    reference = _runner(model, limit, slots=4096 + 1)
    want = reference.prefill(prompts, slots)

    runner = _runner(model, limit, slots=4096 + 1)
    runner.cache.k[:, cached_slots] = reference.cache.k[:, cached_slots]
    runner.cache.v[:, cached_slots] = reference.cache.v[:, cached_slots]
    got = runner.prefill(prompts, slots, cached=cached)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(
        runner.cache.k[:, suffix_slots], reference.cache.k[:, suffix_slots], rtol=1e-4, atol=1e-4
    )
    assert not runner.cache.k[:, runner.graphs.trash_slot].any()  # nothing recomputed
    assert runner.step_counts.eager_prefills == 1

    runner.cache.k[:, cached_slots] = 7.0  # and what it reads decides the answer
    assert not torch.allclose(runner.prefill(prompts, slots, cached=cached), want)
