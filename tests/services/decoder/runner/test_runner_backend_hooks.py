"""The runner knows attention backends only through their hooks: a backend it has never heard
of that says it supports graphs gets the bucketed (graph) path — on the CPU, the eager padded
mode that runs exactly what a replay runs — and computes what the torch reference computes
eagerly; a backend without graph hooks gets eager steps at their own sizes."""

from __future__ import annotations

import pytest
import torch

from tests.services.decoder.conftest import SidModel
from tests.services.decoder.runner.static_attention import StaticTorchAttention
from widebeam.kernels.attention.base import AttentionBackend
from widebeam.kernels.attention.metadata import DecodeBatch, DecodeGroup
from widebeam.kernels.attention.torch_ref import TorchAttention
from widebeam.services.decoder.kv.kv_cache import KVCache
from widebeam.services.decoder.model.transformer import CausalLM
from widebeam.services.decoder.runner.expansion_graphs import ExpansionGraphs
from widebeam.services.decoder.runner.model_runner import ModelRunner
from widebeam.services.decoder.runner.step_inputs import DecodeInputs
from widebeam.services.decoder.search.beam_expansion import Expander

SLOTS = 128
TRASH = SLOTS - 1
PROMPTS = [(3, 4, 5, 6, 7), (8, 9, 10)]
PROMPT_SLOTS = [torch.arange(0, 5), torch.arange(16, 19)]
ROWS = (3, 2)  # beam rows of each request


@pytest.fixture(scope="module")
def model(sid_model: SidModel) -> CausalLM:
    return CausalLM.from_pretrained(sid_model.model_dir)


def _runner(model: CausalLM, backend: AttentionBackend) -> ModelRunner:
    mc = model.config
    cache = KVCache(
        mc.num_hidden_layers, SLOTS, mc.num_key_value_heads, mc.head_dim, torch.float32, "cpu"
    )
    # cuda_graphs asks for capture; on the CPU the bucketed path runs eagerly instead.
    return ModelRunner(
        model, cache, backend, trash_slot=TRASH, cuda_graphs=True, prefill_graph_tokens=2048
    )


def _step(suffixes: list[list[list[int]]], tokens: list[int]) -> DecodeInputs:
    """suffixes: each request's rows' generated slots, oldest first (the last one written now)."""
    groups, positions, row = [], [], 0
    for prompt, table in zip(PROMPT_SLOTS, suffixes, strict=True):
        slots = torch.tensor(table)
        groups.append(DecodeGroup(row, len(table), prompt, slots))
        positions += [len(prompt) + slots.shape[1] - 1] * len(table)
        row += len(table)
    writes = torch.cat([g.suffix_slots[:, -1] for g in groups])
    return DecodeInputs(
        torch.tensor(tokens), torch.tensor(positions), writes, DecodeBatch(tuple(groups))
    )


STEPS = [
    _step([[[32], [33], [34]], [[48], [49]]], [11, 12, 13, 14, 15]),
    # re-parented rows: two share an ancestor slot
    _step([[[32, 35], [34, 36], [32, 37]], [[49, 50], [48, 51]]], [16, 17, 18, 19, 20]),
    _step(
        [[[32, 35, 38], [32, 37, 39], [34, 36, 40]], [[48, 51, 52], [49, 50, 53]]],
        [21, 22, 23, 24, 25],
    ),
]


def test_a_backend_without_graph_hooks_runs_eager_steps(model: CausalLM) -> None:
    runner = _runner(model, TorchAttention())
    assert runner.graphs is None and runner.prefill_graphs is None
    assert type(runner.expander) is Expander
    step = runner.prepare_decode(STEPS[0])
    assert step.shape is None and step.metadata is STEPS[0].batch  # the batch is its metadata


def test_the_runner_drives_an_unknown_backend_through_its_graph_hooks(model: CausalLM) -> None:
    backend = StaticTorchAttention()
    bucketed, reference = _runner(model, backend), _runner(model, TorchAttention())
    assert bucketed.graphs is not None and bucketed.prefill_graphs is not None
    assert isinstance(bucketed.expander, ExpansionGraphs)
    assert not bucketed.graphs.cache.use_graphs  # no CUDA: the same buckets, eagerly

    got = bucketed.prefill(PROMPTS, PROMPT_SLOTS)
    want = reference.prefill(PROMPTS, PROMPT_SLOTS)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert backend.calls["init_prefill_capture"] == 1
    assert backend.calls["prepare_prefill_replay"] == 1
    for inputs in STEPS:
        step = bucketed.prepare_decode(inputs)
        assert step.shape is not None and step.shape.rows == 8  # 5 rows padded to the bucket
        got = bucketed.launch_decode(step)
        want = reference.launch_decode(reference.prepare_decode(inputs))
        assert got.shape == want.shape == (5, model.config.hidden_size)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    # One bucket served the three steps: its buffers were built once, refilled every step.
    assert backend.calls["init_decode_capture"] == 1
    assert backend.calls["prepare_decode_replay"] == len(STEPS)
    assert backend.calls["prepare_decode(bucket)"] == len(STEPS)
    assert backend.calls["prepare_decode"] == 0  # no unpadded step

    real = torch.ones(SLOTS, dtype=torch.bool)
    real[TRASH] = False
    for ours, theirs in (
        (bucketed.cache.k, reference.cache.k),
        (bucketed.cache.v, reference.cache.v),
    ):
        torch.testing.assert_close(ours[:, real], theirs[:, real], rtol=1e-5, atol=1e-5)
    assert bucketed.cache.k[:, TRASH].any()  # padding rows and tokens wrote the trash slot
    assert not reference.cache.k[:, TRASH].any()
