"""Beam expansions replayed from CUDA graphs equal the same padded expansions run eagerly, bit
for bit, step after step; the unpadded eager expansion keeps beams of the same scores (bf16
logits tie often, so which of two tied tokens is kept may differ)."""

from __future__ import annotations

import pytest
import torch

from widebeam.services.decoder.runner.expansion_graphs import ExpansionGraphs, batch_bucket
from widebeam.services.decoder.search.beam_expansion import CohortBatch, Expander, ExpansionSpec
from widebeam.services.decoder.search.beam_step import BeamState, step_scalars
from widebeam.services.decoder.search.beam_step_outputs import StepOutputs

VOCAB, HIDDEN, K = 5000, 64, 48


def test_batch_buckets() -> None:
    assert [batch_bucket(b) for b in (1, 3, 16, 17, 24, 25, 40)] == [1, 3, 16, 24, 24, 32, 40]


def _spec(rows_each: int, wide: bool) -> ExpansionSpec:
    return ExpansionSpec(K, 2 * K, rows_each, (3,), False, False, wide, None)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize(("batch", "wide"), [(3, False), (1, True), (19, False)])
def test_graph_equals_padded_eager(batch: int, wide: bool) -> None:
    device = torch.device("cuda")
    gen = torch.Generator(device=device).manual_seed(batch)
    weight = torch.randn(VOCAB, HIDDEN, generator=gen, device=device, dtype=torch.bfloat16)

    def head(h: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(h, weight)

    runs = {
        "graph": ExpansionGraphs(head, VOCAB, HIDDEN, torch.bfloat16, device, use_graphs=True),
        "padded": ExpansionGraphs(head, VOCAB, HIDDEN, torch.bfloat16, device, use_graphs=False),
        "plain": Expander(head, VOCAB),
    }
    eos = torch.tensor([3], device=device)
    got: dict[str, list[StepOutputs]] = {name: [] for name in runs}
    hiddens = [
        [torch.randn(rows, HIDDEN, generator=gen, device=device, dtype=torch.bfloat16)
         for _ in range(batch)]
        for rows in (1, K, K)
    ]  # fmt: skip
    for name, expander in runs.items():
        previous = None
        for step, parts in enumerate(hiddens):
            state = BeamState.initial(batch, K, device) if previous is None else previous.state
            scalars = [step_scalars(step, 8 - b % 3, 1.0 - b % 2, False) for b in range(batch)]
            cohort = CohortBatch(parts, state, previous, None, scalars, eos)
            previous = expander.run(_spec(parts[0].shape[0], wide), cohort)
            got[name].append(previous)
    assert runs["graph"].captures == 2  # the first step, then the k-row steps
    for graph, padded, plain in zip(got["graph"], got["padded"], got["plain"], strict=True):
        for a, b in zip(graph.tensors(), padded.tensors(), strict=True):
            assert torch.equal(a, b)
        torch.testing.assert_close(graph.state.running_scores, plain.state.running_scores)


@pytest.mark.parametrize(("batch", "wide"), [(3, False), (1, True), (19, False)])
def test_padded_static_steps_equal_plain_steps_on_cpu(batch: int, wide: bool) -> None:
    """The bucketed path without capture (static buffers, state loads, padding requests)
    computes what the plain expander computes, step after step (CI runs this on the CPU)."""
    device = torch.device("cpu")
    gen = torch.Generator().manual_seed(batch)
    weight = torch.randn(VOCAB, HIDDEN, generator=gen).double()

    def head(h: torch.Tensor) -> torch.Tensor:  # float64 products: independent of row count
        return (h.double() @ weight.T).float()

    runs = {
        "padded": ExpansionGraphs(head, VOCAB, HIDDEN, torch.float32, device, use_graphs=False),
        "plain": Expander(head, VOCAB),
    }
    eos = torch.tensor([3])
    hiddens = [
        [torch.randn(rows, HIDDEN, generator=gen) for _ in range(batch)] for rows in (1, K, K)
    ]
    got: dict[str, list[StepOutputs]] = {name: [] for name in runs}
    for name, expander in runs.items():
        previous = None
        for step, parts in enumerate(hiddens):
            state = BeamState.initial(batch, K, device) if previous is None else previous.state
            # The second step loads a stacked state (as after a cohort changed), the third the
            # previous outputs whole.
            shared = previous if step != 1 else None
            # each request with its own length and penalty (the first ends at the third step)
            scalars = [step_scalars(step, 3 + b % 3, 1.0 - b % 2, False) for b in range(batch)]
            cohort = CohortBatch(parts, state, shared, None, scalars, eos)
            previous = expander.run(_spec(parts[0].shape[0], wide), cohort)
            got[name].append(previous)
    for padded, plain in zip(got["padded"], got["plain"], strict=True):
        assert padded.batch_size == batch
        assert torch.equal(padded.ints, plain.ints)
        assert torch.equal(padded.flags, plain.flags)
        assert torch.equal(padded.request_flags, plain.request_flags)
        torch.testing.assert_close(padded.floats, plain.floats, rtol=0, atol=0)
