"""The seam between the model and whatever owns the KV cache.

The model only produces per-token q/k/v; how tokens see each other (causality, which sequence a
token belongs to, cached KV of earlier steps, beam sharing) is the context's business.
"""

from __future__ import annotations

import math
from typing import Protocol, runtime_checkable

import torch


@runtime_checkable
class AttentionContext(Protocol):
    def attend(
        self,
        layer_idx: int,
        q: torch.Tensor,  # [N, n_heads, head_dim], rope applied
        k: torch.Tensor,  # [N, n_kv_heads, head_dim], rope applied
        v: torch.Tensor,  # [N, n_kv_heads, head_dim]
    ) -> torch.Tensor:  # [N, n_heads, head_dim], dtype of q
        """Attend the N new tokens with scale 1/sqrt(head_dim), GQA and causality."""
        ...


class DenseCausalAttention:
    """All N tokens form ONE sequence in order; no cache. The reference path for tests."""

    def attend(
        self,
        layer_idx: int,
        q: torch.Tensor,  # [N, n_heads, head_dim]
        k: torch.Tensor,  # [N, n_kv_heads, head_dim]
        v: torch.Tensor,  # [N, n_kv_heads, head_dim]
    ) -> torch.Tensor:  # [N, n_heads, head_dim]
        return dense_causal_attention(q, k, v)


def dense_causal_attention(
    q: torch.Tensor,  # [N, n_heads, head_dim]
    k: torch.Tensor,  # [M, n_kv_heads, head_dim]
    v: torch.Tensor,  # [M, n_kv_heads, head_dim]
) -> torch.Tensor:  # [N, n_heads, head_dim]
    """Causal softmax attention in fp32. With M > N the queries are the LAST N of the M keys'
    positions (query i sees keys 0..M-N+i), which lets callers reuse this with a prefix cache."""
    n, n_heads, head_dim = q.shape
    m, n_kv, _ = k.shape
    if n_heads % n_kv != 0:
        raise ValueError(f"{n_heads} query heads not divisible by {n_kv} kv heads")
    group = n_heads // n_kv
    # repeat_interleave maps query head h to kv head h // group, matching HF's repeat_kv.
    kf = k.float().repeat_interleave(group, dim=1)  # [M, n_heads, head_dim]
    vf = v.float().repeat_interleave(group, dim=1)
    scores = torch.einsum("nhd,mhd->hnm", q.float(), kf) / math.sqrt(head_dim)
    q_pos = torch.arange(m - n, m, device=q.device)[:, None]
    k_pos = torch.arange(m, device=q.device)[None, :]
    scores = scores.masked_fill(k_pos > q_pos, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    out = torch.einsum("hnm,mhd->nhd", probs, vf)
    return out.to(q.dtype)
