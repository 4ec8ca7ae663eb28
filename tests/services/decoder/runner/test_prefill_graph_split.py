"""`prefill_graph_split`: a prefill batch past the graph limit whose prompts each fit runs as
consecutive graph-sized batches (each in its bucket), not as one eager forward; the answer
and the KV are a plain prefill's, and cached prefixes keep their pages as in any bucket."""

from __future__ import annotations

import random

import pytest
import torch

from tests.services.decoder.conftest import SidModel
from tests.services.decoder.runner.static_attention import StaticTorchAttention
from widebeam.services.decoder.kv.kv_cache import KVCache
from widebeam.services.decoder.model.transformer import CausalLM
from widebeam.services.decoder.runner.model_runner import ModelRunner

SLOTS = 200
TRASH = SLOTS - 1
_rng = random.Random(11)
LENGTHS = (40, 24, 30, 5)
PROMPTS = [tuple(_rng.randrange(3, 200) for _ in range(n)) for n in LENGTHS]
PROMPT_SLOTS = list(torch.arange(sum(LENGTHS)).split(LENGTHS))


@pytest.fixture(scope="module")
def model(sid_model: SidModel) -> CausalLM:
    return CausalLM.from_pretrained(sid_model.model_dir)


def _runner(model: CausalLM, graph_tokens: int, split: bool) -> ModelRunner:
    mc = model.config
    cache = KVCache(
        mc.num_hidden_layers, SLOTS, mc.num_key_value_heads, mc.head_dim, torch.float32, "cpu"
    )
    # On the CPU the bucketed (graph) path runs eagerly at the bucket's shapes.
    return ModelRunner(
        model, cache, StaticTorchAttention(), trash_slot=TRASH, cuda_graphs=True,
        prefill_graph_tokens=graph_tokens, prefill_graph_split=split,
    )  # fmt: skip


def _close(a: torch.Tensor, b: torch.Tensor) -> None:
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_a_long_batch_runs_as_graph_sized_batches(model: CausalLM) -> None:
    plain = _runner(model, 2048, split=False)
    want = plain.prefill(PROMPTS, PROMPT_SLOTS)
    eager = _runner(model, 64, split=False)  # 99 tokens: past the limit, one eager forward
    _close(eager.prefill(PROMPTS, PROMPT_SLOTS), want)
    assert (eager.step_counts.eager_prefills, eager.step_counts.split_prefills) == (1, 0)

    split = _runner(model, 64, split=True)
    got = split.prefill(PROMPTS, PROMPT_SLOTS)
    _close(got, want)
    assert (split.step_counts.eager_prefills, split.step_counts.split_prefills) == (0, 1)
    assert split.prefill_graphs is not None
    assert len(split.prefill_graphs.cache.entries) == 1  # runs of 64 and 35 tokens: one bucket
    used = torch.cat(PROMPT_SLOTS)
    _close(split.cache.k[:, used], plain.cache.k[:, used])
    _close(split.cache.v[:, used], plain.cache.v[:, used])


def test_a_prompt_past_the_limit_alone_keeps_the_eager_forward(model: CausalLM) -> None:
    runner = _runner(model, 32, split=True)  # the 40-token prompt fits no graph
    _close(runner.prefill(PROMPTS, PROMPT_SLOTS), _runner(model, 2048, False).prefill(
        PROMPTS, PROMPT_SLOTS))  # fmt: skip
    assert (runner.step_counts.eager_prefills, runner.step_counts.split_prefills) == (1, 0)


def test_cached_prefixes_keep_their_pages_in_every_run(model: CausalLM) -> None:
    want = _runner(model, 2048, split=False).prefill(PROMPTS, PROMPT_SLOTS)
    cached = [32, 16, 0, 0]
    cached_slots = torch.cat([s[:c] for s, c in zip(PROMPT_SLOTS, cached, strict=True)])
    runner = _runner(model, 64, split=True)
    runner.cache.k[:, cached_slots] = 7.0  # sentinels: read, they would change the answer
    got = runner.prefill(PROMPTS, PROMPT_SLOTS, cached=cached)
    _close(got, want)
    assert (runner.cache.k[:, cached_slots] == 7.0).all()  # written to the trash slot instead
    assert (runner.step_counts.split_prefills, runner.step_counts.eager_prefills) == (1, 0)


def test_the_engine_setting_reaches_the_runner(sid_model: SidModel) -> None:
    assert not sid_model.engine().runner.prefill_graph_split  # off by default
    assert sid_model.engine(prefill_graph_split=True).runner.prefill_graph_split
