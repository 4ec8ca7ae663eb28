"""The attention contexts with an FP8 cache: the runner's bucketed (graph) path — on the CPU the
eager padded mode that runs exactly what a replay runs — hands every layer's scales to the
backend and computes what the torch reference computes eagerly; the KV it stores is the same
bytes; a prefill attends over its rows as stored, so prefilling a prompt whole and prefilling it
after its cached first page give the same hidden states."""

from __future__ import annotations

import pytest
import torch

from tests.services.decoder.runner.static_attention import StaticTorchAttention
from tests.services.decoder.runner.test_runner_backend_hooks import (
    PROMPT_SLOTS,
    PROMPTS,
    SLOTS,
    STEPS,
    TRASH,
    model,  # noqa: F401 (fixture)
)
from widebeam.kernels.attention.base import AttentionBackend
from widebeam.kernels.attention.torch_ref import TorchAttention
from widebeam.kernels.kv.fp8_kv import KV_FP8_DTYPE
from widebeam.services.decoder.kv.kv_cache import KVCache
from widebeam.services.decoder.model.transformer import CausalLM
from widebeam.services.decoder.runner.model_runner import ModelRunner


def _runner(model: CausalLM, backend: AttentionBackend) -> ModelRunner:  # noqa: F811
    mc = model.config
    cache = KVCache(
        mc.num_hidden_layers, SLOTS, mc.num_key_value_heads, mc.head_dim, KV_FP8_DTYPE, "cpu",
        model.kv_scales,
    )  # fmt: skip
    return ModelRunner(
        model, cache, backend, trash_slot=TRASH, cuda_graphs=True, prefill_graph_tokens=2048
    )


def _bytes(x: torch.Tensor) -> torch.Tensor:
    return x.view(torch.uint8)


def test_bucketed_steps_read_fp8_as_the_reference(model: CausalLM) -> None:  # noqa: F811
    bucketed = _runner(model, StaticTorchAttention())
    reference = _runner(model, TorchAttention())
    assert bucketed.graphs is not None and bucketed.prefill_graphs is not None
    got = bucketed.prefill(PROMPTS, PROMPT_SLOTS)
    want = reference.prefill(PROMPTS, PROMPT_SLOTS)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for inputs in STEPS:
        got = bucketed.launch_decode(bucketed.prepare_decode(inputs))
        want = reference.launch_decode(reference.prepare_decode(inputs))
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    real = torch.ones(SLOTS, dtype=torch.bool)
    real[TRASH] = False
    for ours, theirs in zip(
        (bucketed.cache.k, bucketed.cache.v), (reference.cache.k, reference.cache.v), strict=True
    ):
        assert ours.dtype == KV_FP8_DTYPE and theirs[:, real].float().any()
        assert torch.equal(_bytes(ours[:, real]), _bytes(theirs[:, real]))


@pytest.mark.parametrize("backend", [TorchAttention, StaticTorchAttention])
def test_a_cached_prefix_gives_the_hidden_states_of_a_whole_prefill(
    model: CausalLM,  # noqa: F811
    backend: type[AttentionBackend],
) -> None:
    """The second prompt's first 16 tokens are cached (written by the first): the eager
    suffix-only prefill reads them as FP8 from the cache, the whole prefill quantizes its own
    rows the same way."""
    prompt = tuple(range(3, 24))  # 21 tokens: one full page of 16 and 5 more
    slots = torch.arange(32, 32 + len(prompt))
    whole = _runner(model, backend())
    want = whole.prefill([prompt], [slots])
    cached = _runner(model, TorchAttention())  # eager: the suffix-only path
    cached.prefill([prompt[:16]], [slots[:16]])
    got = cached.prefill([prompt], [slots], cached=[16])
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    for ours, theirs in ((cached.cache.k, whole.cache.k), (cached.cache.v, whole.cache.v)):
        assert torch.equal(_bytes(ours[:, slots]), _bytes(theirs[:, slots]))
