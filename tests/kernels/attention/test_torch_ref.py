"""The cascade (shared prompt + private suffix, LSE-merged) equals plain attention."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from widebeam.kernels.attention.metadata import DecodeBatch, DecodeGroup
from widebeam.kernels.attention.torch_ref import (
    PAD_SLACK,
    cascade_decode,
    causal_prefill,
    expand_kv_heads,
    similar_lengths,
)


def _dense(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """q [H, D] against k, v [T, Hkv, D]: plain softmax attention for one query."""
    k, v = expand_kv_heads(k, q.shape[0]), expand_kv_heads(v, q.shape[0])
    probs = torch.softmax(torch.einsum("hd,thd->ht", q, k) * scale, dim=-1)
    return torch.einsum("ht,thd->hd", probs, v)


@pytest.mark.parametrize("q_heads,kv_heads", [(4, 4), (8, 2)])
def test_cascade_decode_equals_dense_attention(q_heads: int, kv_heads: int) -> None:
    torch.manual_seed(0)
    dim, slots = 16, 200
    k_cache, v_cache = torch.randn(slots, kv_heads, dim), torch.randn(slots, kv_heads, dim)
    perm = torch.randperm(slots)
    groups, row = [], 0
    for num_rows, prompt_len, suffix_len in [(3, 7, 1), (5, 20, 4), (1, 1, 6)]:
        prompt = perm[:prompt_len]
        suffix = perm[prompt_len : prompt_len + num_rows * suffix_len].reshape(num_rows, -1)
        perm = perm[prompt_len + num_rows * suffix_len :]
        groups.append(DecodeGroup(row, num_rows, prompt, suffix))
        row += num_rows
    q = torch.randn(row, q_heads, dim)
    scale = 1 / math.sqrt(dim)
    out = cascade_decode(q, k_cache, v_cache, DecodeBatch(tuple(groups)), scale)
    for g in groups:
        for r in range(g.num_rows):
            idx = torch.cat((g.prompt_slots, g.suffix_slots[r]))
            expected = _dense(q[g.row_start + r], k_cache[idx], v_cache[idx], scale)
            torch.testing.assert_close(out[g.row_start + r], expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("seed", "lengths", "scale"),
    [(1, [5, 1, 9], 0.3), (3, [7, 1, 12, 3, 40, 9, 0, 18], 0.25)],
    ids=["three-sequences", "many-lengths-one-empty"],
)
def test_ragged_causal_prefill_equals_per_sequence(
    seed: int, lengths: list[int], scale: float
) -> None:
    torch.manual_seed(seed)
    cu = (0, *itertools.accumulate(lengths))
    q, k, v = torch.randn(cu[-1], 4, 8), torch.randn(cu[-1], 2, 8), torch.randn(cu[-1], 2, 8)
    out = causal_prefill(q, k, v, cu, scale)
    for start, end in itertools.pairwise(cu):
        for t in range(start, end):
            expected = _dense(q[t], k[start : t + 1], v[start : t + 1], scale)
            torch.testing.assert_close(out[t], expected, rtol=1e-5, atol=1e-5)


def test_batched_groups_equal_dense_attention_and_read_no_padding() -> None:
    """Groups of equal shape but different prompt lengths share a padded batch; every slot no
    group references is NaN, so a padded key or value that leaked into a row would show."""
    torch.manual_seed(2)
    q_heads, kv_heads, dim, slots = 4, 2, 8, 400
    k_cache = torch.full((slots, kv_heads, dim), float("nan"))
    v_cache = torch.full((slots, kv_heads, dim), float("nan"))
    free = torch.randperm(slots - 1) + 1  # slot 0 (the padding index) is never a real slot
    groups, row = [], 0
    for num_rows, prompt_len, suffix_len in [(4, 9, 2), (4, 3, 2), (4, 14, 2), (4, 40, 2),
                                             (2, 5, 3), (4, 1, 2)]:  # fmt: skip
        used = free[: prompt_len + num_rows * suffix_len]
        free = free[len(used) :]
        k_cache[used], v_cache[used] = torch.randn(2, len(used), kv_heads, dim)
        suffix = used[prompt_len:].reshape(num_rows, suffix_len)
        groups.append(DecodeGroup(row, num_rows, used[:prompt_len], suffix))
        row += num_rows
    q = torch.randn(row, q_heads, dim)
    out = cascade_decode(q, k_cache, v_cache, DecodeBatch(tuple(groups)), 0.3)
    assert len(similar_lengths([len(g.prompt_slots) for g in groups], [0] * len(groups))) < 6
    for g in groups:
        for r in range(g.num_rows):
            idx = torch.cat((g.prompt_slots, g.suffix_slots[r]))
            expected = _dense(q[g.row_start + r], k_cache[idx], v_cache[idx], 0.3)
            torch.testing.assert_close(out[g.row_start + r], expected, rtol=1e-5, atol=1e-5)


def test_similar_lengths_bounds_padding() -> None:
    lengths = [100, 3, 40, 5, 60, 17, 1, 30, 2, 200]
    keys = ["a"] * 8 + ["b"] * 2
    batches = similar_lengths(lengths, keys)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches:
        assert len({keys[i] for i in b}) == 1
        shortest, longest = min(lengths[i] for i in b), max(lengths[i] for i in b)
        assert longest - shortest <= max(shortest, PAD_SLACK)
    # "a" by length: 1 3 5 17 | 30 40 60 | 100; "b": 2 | 200
    assert [[lengths[i] for i in b] for b in batches] == [[1, 3, 5, 17], [30, 40, 60], [100],
                                                          [2], [200]]  # fmt: skip
