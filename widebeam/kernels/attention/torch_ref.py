"""Plain-torch reference attention: the oracle for every GPU kernel and the CPU path.

Computes in fp32. An FP8 cache (`widebeam/kernels/kv/fp8_kv.py`) is read as its stored values times
its layer's per-head scales, in fp32, before anything else. Decode is two-level ("cascade"):
attention of a request's rows over its shared prompt KV, attention of each row over its private
suffix, merged by log-sum-exp.

Requests (decode groups, prefill segments) are batched: those of similar length run as one
padded batch (padded keys masked out), so a step costs a few tensor ops rather than a few per
request. Padding is bounded (`similar_lengths`) so one long prompt does not pad every short one.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Sequence

import torch
from torch.nn.utils.rnn import pad_sequence

from widebeam.kernels.attention.base import AttentionBackend
from widebeam.kernels.attention.fp8_probabilities import rounded_probabilities
from widebeam.kernels.attention.metadata import DecodeBatch, DecodeGroup, PrefillBatch
from widebeam.kernels.fp8.quantize import dequantize_rows, quantize_rows
from widebeam.kernels.kv.fp8_kv import KvScales, take_rows

# Requests batched together differ in length by at most max(shortest, this) tokens.
PAD_SLACK = 16


def expand_kv_heads(x: torch.Tensor, q_heads: int) -> torch.Tensor:
    """[..., kv_heads, D] -> [..., q_heads, D]; q head h reads kv head h // group size."""
    return x.repeat_interleave(q_heads // x.shape[-2], dim=-2)


def attention_with_lse(
    q: torch.Tensor,  # [..., R, Hq, D] fp32
    k: torch.Tensor,  # [..., T, Hkv, D] shared by the R rows, or [..., R, T, Hkv, D] per row
    v: torch.Tensor,  # same layout as k
    scale: float,
    mask: torch.Tensor | None = None,  # [..., R, T] bool (broadcastable), True = visible
    fp8_probabilities: bool = False,  # P rounded as `fp8_probabilities.rounded_probabilities`
) -> tuple[torch.Tensor, torch.Tensor]:  # out [..., R, Hq, D] fp32, lse [..., R, Hq] fp32
    """Grouped-query attention without copying K/V per query head: q is viewed as
    [..., R, Hkv, group, D]; shared K/V are never broadcast to the rows. Leading dims batch
    independent attentions. A row that sees no key gets out 0, lse -inf (with FP8
    probabilities, the lse of the unrounded ones)."""
    if k.dim() == q.dim() + 1:  # per-row K/V: each row is a batch of one query
        out, lse = attention_with_lse(
            q.unsqueeze(-3), k, v, scale, None if mask is None else mask.unsqueeze(-2),
            fp8_probabilities,
        )  # fmt: skip
        return out.squeeze(-3), lse.squeeze(-2)
    *batch, rows, q_heads, dim = q.shape
    kv_heads = k.shape[-2]
    qg = q.reshape(*batch, rows, kv_heads, q_heads // kv_heads, dim)
    scores = torch.einsum("...rkgd,...tkd->...rkgt", qg, k) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask[..., :, None, None, :], float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)  # [..., R, Hkv, group]
    if fp8_probabilities:
        probs = rounded_probabilities(scores)
    else:
        probs = torch.exp(scores - lse[..., None]).nan_to_num(0.0)
    out = torch.einsum("...rkgt,...tkd->...rkgd", probs, v)
    return out.reshape(*batch, rows, q_heads, dim), lse.reshape(*batch, rows, q_heads)


def merge_attention_states(
    out_a: torch.Tensor,  # [..., H, D] fp32
    lse_a: torch.Tensor,  # [..., H] fp32
    out_b: torch.Tensor,  # [..., H, D] fp32
    lse_b: torch.Tensor,  # [..., H] fp32
) -> tuple[torch.Tensor, torch.Tensor]:
    lse = torch.logaddexp(lse_a, lse_b)
    weight_a = torch.exp(lse_a - lse).nan_to_num(0.0)[..., None]
    weight_b = torch.exp(lse_b - lse).nan_to_num(0.0)[..., None]
    return out_a * weight_a + out_b * weight_b, lse


def similar_lengths(lengths: Sequence[int], keys: Sequence[Hashable]) -> list[list[int]]:
    """Indices into `lengths` in batches: equal keys, and lengths within max(shortest,
    PAD_SLACK) of the batch's shortest, so padding to the longest at most about doubles it."""
    order = sorted(range(len(lengths)), key=lambda i: (keys[i], lengths[i]))
    batches: list[list[int]] = []
    for i in order:
        first = batches[-1][0] if batches else None  # the batch's shortest (sorted order)
        if (
            first is not None
            and keys[first] == keys[i]
            and lengths[i] - lengths[first] <= max(lengths[first], PAD_SLACK)
        ):
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


def padded_index(
    indices: Sequence[torch.Tensor],  # per request: [n_i] int64
) -> tuple[torch.Tensor, torch.Tensor]:  # [B, max n_i] int64 (padding 0), [B, max n_i] bool
    """Ragged index lists as one padded table and its mask (True = a real entry)."""
    table = pad_sequence(list(indices), batch_first=True, padding_value=0)
    lengths = torch.tensor([len(i) for i in indices], device=table.device)
    return table, torch.arange(table.shape[1], device=table.device) < lengths[:, None]


def _read(
    x: torch.Tensor,  # [..., H, D] K or V as stored
    scale: torch.Tensor | None,  # [H] fp32, the layer's K or V scales of an FP8 cache
) -> torch.Tensor:  # [..., H, D] fp32
    return x.float() if scale is None else x.float() * scale[:, None]


def _gather(
    x: torch.Tensor,  # [slots, H, D]
    index: torch.Tensor,  # [...] int64
    valid: torch.Tensor,  # [...] bool
    scale: torch.Tensor | None = None,  # [H] fp32 (an FP8 x)
) -> torch.Tensor:  # [..., H, D] fp32
    """Padding entries read as 0 (the slot they point at may hold anything, even NaN)."""
    return _read(take_rows(x, index), scale).masked_fill(~valid[..., None, None], 0.0)


def _scales(kv_scales: KvScales | None) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    return (None, None) if kv_scales is None else (kv_scales.k, kv_scales.v)


def causal_prefill(
    q: torch.Tensor,  # [N, Hq, D]
    k: torch.Tensor,  # [N, Hkv, D]
    v: torch.Tensor,  # [N, Hkv, D]
    cu_seqlens: tuple[int, ...],
    scale: float,
    kv_scales: KvScales | None = None,  # k, v: FP8 values (stored or widened) of these
    fp8_queries: bool = False,  # the scores from queries quantized per token and head
    fp8_probabilities: bool = False,  # P rounded to FP8 (`fp8_probabilities.py`)
) -> torch.Tensor:  # [N, Hq, D] dtype of q
    out = torch.empty_like(q)
    k_scale, v_scale = _scales(kv_scales)
    scored = fp8_rounded_queries(q) if fp8_queries else q
    spans = [(a, b) for a, b in itertools.pairwise(cu_seqlens) if b > a]
    lengths = [b - a for a, b in spans]
    for batch in similar_lengths(lengths, [None] * len(spans)):
        tokens, real = padded_index(
            [torch.arange(*spans[i], device=q.device) for i in batch]
        )  # [B, L] each
        width = tokens.shape[1]
        causal = torch.ones(width, width, dtype=torch.bool, device=q.device).tril()
        visible = causal & real[:, None, :]  # [B, L, L]
        seg, _ = attention_with_lse(
            scored[tokens].float(),
            _gather(k, tokens, real, k_scale),
            _gather(v, tokens, real, v_scale),
            scale,
            visible,
            fp8_probabilities,
        )  # [B, L, Hq, D]
        out[tokens[real]] = seg[real].to(q.dtype)
    return out


def cascade_decode(
    q: torch.Tensor,  # [R, Hq, D]
    k_cache: torch.Tensor,  # [slots, Hkv, D]
    v_cache: torch.Tensor,  # [slots, Hkv, D]
    batch: DecodeBatch,
    scale: float,
    kv_scales: KvScales | None = None,  # an FP8 cache's scales
    fp8_queries: bool = False,  # the prompt's scores from queries quantized per row and head
    fp8_probabilities: bool = False,  # the prompt's P rounded to FP8 (`fp8_probabilities.py`)
) -> torch.Tensor:  # [R, Hq, D] dtype of q
    """Groups with the same row count and suffix length (and similar prompt lengths) run as one
    batch; each group's prompt KV is read once for all its rows. `fp8_queries`: the prompt part
    takes each (row, head)'s query as `quantize_rows` rounds it to FP8, as the prefix kernel's
    QK_FP8 does (the suffix part, the exact query); `fp8_probabilities`: the prompt part's
    probabilities rounded to FP8, as its PV_FP8 does (the suffix's, not)."""
    out = torch.empty_like(q)
    q_prompt = fp8_rounded_queries(q) if fp8_queries else q
    k_scale, v_scale = _scales(kv_scales)
    groups = batch.groups
    keys = [(g.num_rows, g.suffix_slots.shape[1]) for g in groups]
    for members in similar_lengths([len(g.prompt_slots) for g in groups], keys):
        chosen = [groups[i] for i in members]
        rows = _group_rows(chosen, q.device)  # [B, n]
        qb = q[rows].float()  # [B, n, Hq, D]
        prompt, real = padded_index([g.prompt_slots for g in chosen])  # [B, P] each
        out_p, lse_p = attention_with_lse(
            q_prompt[rows].float(),
            _gather(k_cache, prompt, real, k_scale),  # [B, P, Hkv, D], shared by the rows
            _gather(v_cache, prompt, real, v_scale),
            scale,
            real[:, None, :],
            fp8_probabilities,
        )
        suffix = torch.stack([g.suffix_slots for g in chosen])  # [B, n, S]
        out_s, lse_s = attention_with_lse(
            qb,
            _read(take_rows(k_cache, suffix), k_scale),
            _read(take_rows(v_cache, suffix), v_scale),
            scale,
        )
        merged, _ = merge_attention_states(out_p, lse_p, out_s, lse_s)
        out[rows.reshape(-1)] = merged.flatten(0, 1).to(q.dtype)
    return out


def fp8_rounded_queries(q: torch.Tensor) -> torch.Tensor:  # [R, Hq, D] -> the same, fp32
    """Each (row, head)'s query rounded to FP8 with its own scale (`quantize_rows`), as values."""
    rows, heads, dim = q.shape
    quantized = quantize_rows(q.reshape(rows * heads, dim), cols=dim)
    return dequantize_rows(quantized).reshape(rows, heads, dim)


def _group_rows(groups: Sequence[DecodeGroup], device: torch.device) -> torch.Tensor:
    """[B, n] int64: the rows of groups that all have n rows."""
    starts = torch.tensor([g.row_start for g in groups], device=device)
    return starts[:, None] + torch.arange(groups[0].num_rows, device=device)


class TorchAttention(AttentionBackend):
    """The reference backend: eager steps only (it batches groups on the host, with shapes
    that vary per step), its metadata the batches themselves."""

    name = "torch"

    def __init__(self, fp8_queries: bool = False, fp8_probabilities: bool = False) -> None:
        """fp8_queries: over an FP8 cache, a prefill's scores and decode's over the prompt take
        queries rounded to FP8 (`causal_prefill`'s and `cascade_decode`'s, as the Triton
        backend's prefill and prefix kernels); fp8_probabilities: their probabilities are
        rounded to FP8 (`fp8_probabilities.py`)."""
        self.fp8_queries = fp8_queries
        self.fp8_probabilities = fp8_probabilities

    def prefill(
        self,
        q: torch.Tensor,  # [N, Hq, D]
        k: torch.Tensor,  # [N, Hkv, D]
        v: torch.Tensor,  # [N, Hkv, D]
        metadata: object,  # a PrefillBatch
        scale: float,
        kv_scales: KvScales | None = None,
    ) -> torch.Tensor:  # [N, Hq, D] dtype of q
        if not isinstance(metadata, PrefillBatch):
            raise TypeError(f"the torch backend takes a PrefillBatch, got {type(metadata)}")
        fp8 = kv_scales is not None
        return causal_prefill(
            q, k, v, metadata.cu_seqlens, scale, kv_scales,
            self.fp8_queries and fp8, self.fp8_probabilities and fp8,
        )  # fmt: skip

    def decode(
        self,
        q: torch.Tensor,  # [R, Hq, D]
        k_cache: torch.Tensor,  # [slots, Hkv, D]
        v_cache: torch.Tensor,  # [slots, Hkv, D]
        metadata: object,  # a DecodeBatch
        scale: float,
        kv_scales: KvScales | None = None,
    ) -> torch.Tensor:  # [R, Hq, D] dtype of q
        if not isinstance(metadata, DecodeBatch):
            raise TypeError(f"the torch backend takes a DecodeBatch, got {type(metadata)}")
        fp8 = kv_scales is not None
        return cascade_decode(
            q, k_cache, v_cache, metadata, scale, kv_scales,
            self.fp8_queries and fp8, self.fp8_probabilities and fp8,
        )  # fmt: skip
