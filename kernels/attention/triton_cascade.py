"""Two-level (cascade) decode attention in Triton over the slot-addressed KV cache.

Kernel 1 (`triton_prefix.prefix_kernel`): a block of one request's rows × its shared prompt KV
on tensor cores, per prompt split; writes normalised partial outputs and their log-sum-exps.

Kernel 2 (`_suffix_merge_kernel`): one program per (row, KV head). It gathers the row's private
suffix slots (short: at most max_new_tokens), runs the same online softmax on CUDA cores (M would
be just the GQA group, too small for tensor cores), then folds in the prompt partials by LSE and
writes the final output in the query dtype.

LSEs inside this module are in log2 units (exp2 is the cheap instruction); nothing outside sees
them. Accumulation is fp32 for every input dtype.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from widebeam.kernels.attention.packed import PackedDecode
from widebeam.kernels.attention.triton_common import (
    LOG2E,
    dot_precision,
    gqa_padded,
    interpreting,
)
from widebeam.kernels.attention.triton_prefix import prefix_kernel


@triton.jit
def _suffix_merge_kernel(
    q_ptr,  # [R, HQ, D]
    k_ptr,  # [slots, HKV, D]
    v_ptr,  # [slots, HKV, D]
    o_part_ptr,  # [num_splits, R, HQ, D] fp32 from prefix_kernel
    lse_part_ptr,  # [num_splits, R, HQ] fp32 (log2 units)
    out_ptr,  # [R, HQ, D] dtype of q, contiguous
    row_group_ptr,  # [R] int32, -1 = padding row
    row_suffix_len_ptr,  # [R] int32
    suffix_ptr,  # [R, S_cap] int32 slot ids
    num_rows,  # R
    num_splits,  # prompt chunks per work item (runtime: no recompile per value)
    stride_qr,
    stride_qh,
    stride_ks,
    stride_kh,
    stride_vs,
    stride_vh,
    stride_suffix,
    qk_scale,  # softmax scale * log2(e)
    HQ: tl.constexpr,
    GQA: tl.constexpr,
    GQA_P: tl.constexpr,
    D: tl.constexpr,
    BLOCK_S: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    kv_head = tl.program_id(1)
    live = tl.load(row_group_ptr + row) >= 0
    suffix_len = tl.where(live, tl.load(row_suffix_len_ptr + row), 0)
    splits = tl.where(live, num_splits, 0)  # padding rows have no prompt partials
    j = tl.arange(0, GQA_P)
    head = kv_head * GQA + j
    j_ok = j < GQA
    d = tl.arange(0, D)
    q = tl.load(
        q_ptr + row * stride_qr + head[:, None] * stride_qh + d[None, :],
        mask=j_ok[:, None],
        other=0.0,
    ).to(tl.float32)
    m_i = tl.full([GQA_P], float("-inf"), tl.float32)
    l_i = tl.zeros([GQA_P], tl.float32)
    acc = tl.zeros([GQA_P, D], tl.float32)
    for s0 in range(0, suffix_len, BLOCK_S):
        s_idx = s0 + tl.arange(0, BLOCK_S)
        s_ok = s_idx < suffix_len
        slot = tl.load(suffix_ptr + row * stride_suffix + s_idx, mask=s_ok, other=0).to(tl.int64)
        k = tl.load(
            k_ptr + slot[:, None] * stride_ks + kv_head * stride_kh + d[None, :],
            mask=s_ok[:, None],
            other=0.0,
        ).to(tl.float32)
        v = tl.load(
            v_ptr + slot[:, None] * stride_vs + kv_head * stride_vh + d[None, :],
            mask=s_ok[:, None],
            other=0.0,
        ).to(tl.float32)
        s = tl.sum(q[:, None, :] * k[None, :, :], 2) * qk_scale  # [GQA_P, BLOCK_S]
        s = tl.where(s_ok[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * v[None, :, :], 1)
        m_i = m_new
    # A prompt partial is a normalised state (out, lse): merge it as (m = lse, l = 1, acc = out).
    for sp in range(0, splits):
        part = (sp * num_rows + row) * HQ + head
        lse_p = tl.load(lse_part_ptr + part, mask=j_ok, other=float("-inf"))
        o_p = tl.load(o_part_ptr + part[:, None] * D + d[None, :], mask=j_ok[:, None], other=0.0)
        m_new = tl.maximum(m_i, lse_p)
        m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)  # both empty: avoid -inf - -inf
        alpha = tl.exp2(m_i - m_ref)
        beta = tl.exp2(lse_p - m_ref)
        l_i = l_i * alpha + beta
        acc = acc * alpha[:, None] + o_p * beta[:, None]
        m_i = m_new
    has = l_i > 0.0  # padding rows and rows with no KV at all get zeros, not NaN
    out = tl.where(has[:, None], acc / tl.where(has, l_i, 1.0)[:, None], 0.0)
    tl.store(
        out_ptr + (row * HQ + head)[:, None] * D + d[None, :],
        out.to(out_ptr.dtype.element_ty),
        mask=j_ok[:, None],
    )


def cascade_decode_packed(
    q: torch.Tensor,  # [R, Hq, D]
    k_cache: torch.Tensor,  # [slots, Hkv, D] one layer
    v_cache: torch.Tensor,  # [slots, Hkv, D]
    packed: PackedDecode,
    scale: float,
    *,
    out: torch.Tensor | None = None,  # [R, Hq, D] contiguous, dtype of q (static buffer)
    block_n: int = 64,
    block_s: int = 16,
) -> torch.Tensor:  # [R, Hq, D] dtype of q
    rows, q_heads, dim = q.shape
    kv_heads = k_cache.shape[1]
    if packed.num_rows != rows:
        raise ValueError(f"packed batch has {packed.num_rows} rows, q has {rows}")
    if dim & (dim - 1) or k_cache.shape[2] != dim:
        raise ValueError(f"head_dim must be a power of two equal for q and kv, got {dim}")
    gqa_p = gqa_padded(q_heads, kv_heads)
    if packed.block_rows * gqa_p < 16 or packed.block_rows & (packed.block_rows - 1):
        raise ValueError("block_rows must be a power of two with block_rows * gqa >= 16")
    if k_cache.dtype != q.dtype or v_cache.dtype != q.dtype:
        raise ValueError(f"q is {q.dtype} but the cache is {k_cache.dtype}/{v_cache.dtype}")
    if k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1:  # never copy a cache layer silently
        raise ValueError("the KV cache's head_dim must be contiguous")
    q = q if q.stride(-1) == 1 else q.contiguous()
    if out is None:
        out = torch.empty((rows, q_heads, dim), dtype=q.dtype, device=q.device)
    elif out.shape != q.shape or out.dtype != q.dtype or not out.is_contiguous():
        raise ValueError("out must be a contiguous tensor of q's shape and dtype")
    if rows == 0:
        return out
    splits = packed.num_splits
    o_part = torch.empty((splits, rows, q_heads, dim), dtype=torch.float32, device=q.device)
    lse_part = torch.empty((splits, rows, q_heads), dtype=torch.float32, device=q.device)
    qk_scale = scale * LOG2E
    common = dict(HQ=q_heads, GQA=q_heads // kv_heads, GQA_P=gqa_p, D=dim)
    items = packed.work_group.shape[0]
    if items:
        prefix_kernel[(items, kv_heads, splits)](
            q, k_cache, v_cache, o_part, lse_part,
            packed.work_group, packed.work_row_start, packed.group_row_start,
            packed.group_num_rows, packed.group_prompt_len, packed.group_prompt_table,
            rows, splits, q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1),
            v_cache.stride(0), v_cache.stride(1), packed.group_prompt_table.stride(0),
            qk_scale, BLOCK_R=packed.block_rows, BLOCK_N=block_n, PAGE=packed.page_size,
            UPCAST=interpreting(prefix_kernel), DOT_PRECISION=dot_precision(q.dtype), **common,
        )  # fmt: skip
    _suffix_merge_kernel[(rows, kv_heads)](
        q, k_cache, v_cache, o_part, lse_part, out,
        packed.row_group, packed.row_suffix_len, packed.row_suffix_slots,
        rows, splits, q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1),
        v_cache.stride(0), v_cache.stride(1), packed.row_suffix_slots.stride(0),
        qk_scale, BLOCK_S=block_s, **common,
    )  # fmt: skip
    return out
