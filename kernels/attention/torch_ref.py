"""Plain-torch reference attention: the oracle for every GPU kernel and the CPU path.

Computes in fp32. Decode is two-level ("cascade"): attention of a request's rows over its
shared prompt KV, attention of each row over its private suffix, merged by log-sum-exp.
"""

from __future__ import annotations

import itertools

import torch

from widebeam.kernels.attention.base import AttentionBackend
from widebeam.kernels.attention.metadata import DecodeBatch, PrefillBatch


def expand_kv_heads(x: torch.Tensor, q_heads: int) -> torch.Tensor:
    """[..., kv_heads, D] -> [..., q_heads, D]; q head h reads kv head h // group size."""
    return x.repeat_interleave(q_heads // x.shape[-2], dim=-2)


def attention_with_lse(
    q: torch.Tensor,  # [R, Hq, D] fp32
    k: torch.Tensor,  # [T, Hkv, D] shared by all rows, or [R, T, Hkv, D] per row; fp32
    v: torch.Tensor,  # same layout as k
    scale: float,
    mask: torch.Tensor | None = None,  # [R, T] bool, True = visible
) -> tuple[torch.Tensor, torch.Tensor]:  # out [R, Hq, D] fp32, lse [R, Hq] fp32
    """Grouped-query attention without copying K/V per query head: q is viewed as
    [R, Hkv, group, D]; shared K/V are never broadcast to the rows."""
    rows, q_heads, dim = q.shape
    kv_heads = k.shape[-2]
    qg = q.view(rows, kv_heads, q_heads // kv_heads, dim)
    if k.dim() == 3:
        scores = torch.einsum("rkgd,tkd->rkgt", qg, k) * scale
    else:
        scores = torch.einsum("rkgd,rtkd->rkgt", qg, k) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask[:, None, None, :], float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)  # [R, Hkv, group]
    probs = torch.exp(scores - lse[..., None]).nan_to_num(0.0)
    if v.dim() == 3:
        out = torch.einsum("rkgt,tkd->rkgd", probs, v)
    else:
        out = torch.einsum("rkgt,rtkd->rkgd", probs, v)
    return out.reshape(rows, q_heads, dim), lse.reshape(rows, q_heads)


def merge_attention_states(
    out_a: torch.Tensor,  # [R, H, D] fp32
    lse_a: torch.Tensor,  # [R, H] fp32
    out_b: torch.Tensor,  # [R, H, D] fp32
    lse_b: torch.Tensor,  # [R, H] fp32
) -> tuple[torch.Tensor, torch.Tensor]:
    lse = torch.logaddexp(lse_a, lse_b)
    weight_a = torch.exp(lse_a - lse).nan_to_num(0.0)[..., None]
    weight_b = torch.exp(lse_b - lse).nan_to_num(0.0)[..., None]
    return out_a * weight_a + out_b * weight_b, lse


def causal_prefill(
    q: torch.Tensor,  # [N, Hq, D]
    k: torch.Tensor,  # [N, Hkv, D]
    v: torch.Tensor,  # [N, Hkv, D]
    cu_seqlens: tuple[int, ...],
    scale: float,
) -> torch.Tensor:  # [N, Hq, D] dtype of q
    out = torch.empty_like(q)
    for start, end in itertools.pairwise(cu_seqlens):
        length = end - start
        if length == 0:
            continue
        mask = torch.ones(length, length, dtype=torch.bool, device=q.device).tril()
        seg, _ = attention_with_lse(
            q[start:end].float(), k[start:end].float(), v[start:end].float(), scale, mask
        )
        out[start:end] = seg.to(q.dtype)
    return out


def cascade_decode(
    q: torch.Tensor,  # [R, Hq, D]
    k_cache: torch.Tensor,  # [slots, Hkv, D]
    v_cache: torch.Tensor,  # [slots, Hkv, D]
    batch: DecodeBatch,
    scale: float,
) -> torch.Tensor:  # [R, Hq, D] dtype of q
    out = torch.empty_like(q)
    for group in batch.groups:
        rows = slice(group.row_start, group.row_start + group.num_rows)
        qg = q[rows].float()
        prompt_k = k_cache[group.prompt_slots].float()  # [P, Hkv, D], read once for all rows
        prompt_v = v_cache[group.prompt_slots].float()
        out_p, lse_p = attention_with_lse(qg, prompt_k, prompt_v, scale)
        suffix_k = k_cache[group.suffix_slots].float()  # [rows, S, Hkv, D]
        suffix_v = v_cache[group.suffix_slots].float()
        out_s, lse_s = attention_with_lse(qg, suffix_k, suffix_v, scale)
        merged, _ = merge_attention_states(out_p, lse_p, out_s, lse_s)
        out[rows] = merged.to(q.dtype)
    return out


class TorchAttention(AttentionBackend):
    """The reference backend: eager steps only (it loops over groups on the host), its
    metadata the batches themselves."""

    name = "torch"

    def prefill(
        self,
        q: torch.Tensor,  # [N, Hq, D]
        k: torch.Tensor,  # [N, Hkv, D]
        v: torch.Tensor,  # [N, Hkv, D]
        metadata: object,  # a PrefillBatch
        scale: float,
    ) -> torch.Tensor:  # [N, Hq, D] dtype of q
        if not isinstance(metadata, PrefillBatch):
            raise TypeError(f"the torch backend takes a PrefillBatch, got {type(metadata)}")
        return causal_prefill(q, k, v, metadata.cu_seqlens, scale)

    def decode(
        self,
        q: torch.Tensor,  # [R, Hq, D]
        k_cache: torch.Tensor,  # [slots, Hkv, D]
        v_cache: torch.Tensor,  # [slots, Hkv, D]
        metadata: object,  # a DecodeBatch
        scale: float,
    ) -> torch.Tensor:  # [R, Hq, D] dtype of q
        if not isinstance(metadata, DecodeBatch):
            raise TypeError(f"the torch backend takes a DecodeBatch, got {type(metadata)}")
        return cascade_decode(q, k_cache, v_cache, metadata, scale)
