"""Demo building blocks: the synthetic data's structure, the training batches' prompt format,
and the padded training attention against the serving reference."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from widebeam.demo.config import DataConfig, TrainConfig
from widebeam.demo.data import generate
from widebeam.demo.evaluate import rank_metrics
from widebeam.demo.model import PaddedCausalAttention
from widebeam.demo.train import _loss_pattern, batches, item_token_table
from widebeam.services.catalog.sid_layout import SidLayout, SidLevel
from widebeam.services.decoder.model.attention_context import dense_causal_attention
from widebeam.services.decoder.server.prompting import history_prompt

SMALL = DataConfig(num_items=300, num_categories=5, num_users=200, min_len=5, max_len=10)


def test_data_is_seeded_and_structured() -> None:
    a, b = generate(SMALL), generate(SMALL)
    assert all(np.array_equal(x, y) for x, y in zip(a.sequences, b.sequences, strict=True))
    assert not np.array_equal(generate(DataConfig(**{**SMALL.__dict__, "seed": 1})).sequences[0],
                              a.sequences[0])  # fmt: skip
    assert all(5 <= len(s) <= 10 for s in a.sequences)
    emb = a.item_embeddings
    # Consecutive items are much closer than random pairs: the walk follows neighbourhoods.
    pairs = np.concatenate([np.stack([s[:-1], s[1:]], axis=1) for s in a.sequences])
    step = np.linalg.norm(emb[pairs[:, 0]] - emb[pairs[:, 1]], axis=1).mean()
    rng = np.random.default_rng(0)
    rand = np.linalg.norm(emb[rng.integers(300, size=2000)] - emb[rng.integers(300, size=2000)],
                          axis=1).mean()  # fmt: skip
    assert step < 0.7 * rand
    # Held-out split: the last item of each user, excluded from the training counts.
    assert a.held_out().tolist() == [s[-1] for s in a.sequences]
    assert a.train_counts().sum() == sum(len(s) - 1 for s in a.sequences)


def test_training_rows_are_serving_prompts() -> None:
    layout = SidLayout((SidLevel(10, 4), SidLevel(14, 4)), begin_token_id=18, end_token_id=19)
    codes = np.array([[0, 1], [2, 3], [1, 1]], dtype=np.int64)
    tokens = item_token_table(layout, codes)  # [3, 4]
    seqs = [np.array([0, 2, 1]), np.array([1])]
    cfg = TrainConfig(batch_size=2, max_items=5)
    (tok, mask, labels), *rest = batches(seqs, tokens, _loss_pattern(layout), cfg,
                                         np.random.default_rng(0), pad_id=0)  # fmt: skip
    assert not rest
    row = 0 if mask[0].sum() > mask[1].sum() else 1
    full = tok[row].tolist()
    for t in range(3):  # the prefix before item t's codes is the history prompt of items[:t]
        assert full[: 4 * t + 1] == history_prompt(layout, codes[seqs[0][:t]].tolist())
    # Targets: each item's codes and its end token, nothing else.
    targets = [full[p + 1] for p in np.flatnonzero(mask[row].numpy())]
    assert targets == [10, 15, 19, 11, 15, 19, 12, 17, 19]
    assert sorted(labels.tolist()) == sorted([*targets, 12, 17, 19])
    assert tok[1 - row].tolist() == [18, 12, 17, 19] + [0] * 8  # right padding


def test_padded_attention_matches_per_sequence_reference() -> None:
    torch.manual_seed(0)
    lengths, t = [5, 3], 5
    q = torch.randn(2 * t, 4, 8)  # [B·T, heads, hd]
    k, v = torch.randn(2 * t, 2, 8), torch.randn(2 * t, 2, 8)  # GQA: 2 kv heads
    out = PaddedCausalAttention(2, t).attend(0, q, k, v)  # [B·T, 4, 8]
    for b, n in enumerate(lengths):
        rows = slice(b * t, b * t + n)  # real tokens only; padding after them is ignored
        ref = dense_causal_attention(q[rows], k[rows], v[rows])
        torch.testing.assert_close(out[rows], ref, rtol=1e-5, atol=1e-5)


def test_rank_metrics() -> None:
    recall, ndcg = rank_metrics([["a", "b"], ["c"], ["d"] * 0], ["b", "x", "y"], k=10)
    assert recall == pytest.approx(1 / 3)
    assert ndcg == pytest.approx(1 / math.log2(3) / 3)
    assert rank_metrics([["a", "b"]], ["b"], k=1) == (0.0, 0.0)  # outside the top k
