"""The cascade (shared prompt + private suffix, LSE-merged) equals plain attention."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from widebeam.kernels.attention.metadata import DecodeBatch, DecodeGroup
from widebeam.kernels.attention.torch_ref import cascade_decode, causal_prefill, expand_kv_heads


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


def test_ragged_causal_prefill_equals_per_sequence() -> None:
    torch.manual_seed(1)
    lengths = [5, 1, 9]
    total = sum(lengths)
    q, k, v = torch.randn(total, 4, 8), torch.randn(total, 2, 8), torch.randn(total, 2, 8)
    cu = (0, 5, 6, 15)
    out = causal_prefill(q, k, v, cu, 0.3)
    for start, end in itertools.pairwise(cu):
        for t in range(start, end):
            expected = _dense(q[t], k[start : t + 1], v[start : t + 1], 0.3)
            torch.testing.assert_close(out[t], expected, rtol=1e-5, atol=1e-5)
