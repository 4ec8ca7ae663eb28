"""Decode kernel 1 of the cascade: a request's rows against its shared prompt KV.

One program per (work item = a block of one request's rows, KV head, prompt split). The block's
rows × the GQA group's query heads form the M dimension of `tl.dot`, so the prompt KV is streamed
once per block of rows, not once per row: many queries against one KV, on tensor cores. Long
prompts are split across programs (flash-decoding) so that a single wide request still fills the
GPU; each split writes a normalised partial output and its log2-unit log-sum-exp, which
`triton_cascade._suffix_merge_kernel` folds into the row's result.

A CUDA graph fixes the grid, so it is launched at a bucket's capacities (work items, splits);
the programs of padding items and of splits beyond the batch's `live_splits` return before they
load anything, which keeps the padding nearly free.

An FP8 cache (KV_FP8) is read as stored and widened to KV_DOT (`triton_common.fp8_kv_dot`: fp16
where a group's rows span several work items, each widening every prompt tile again; exact,
every e4m3 value is a bf16, fp16 and fp32 value), the queries cast to it once; the head's K
scale multiplies the scores and its V scale the output, the same as dequantizing every key and
value, in fewer multiplies. With QK_FP8 the queries come quantized to e4m3 (per row and head,
`quantize.quantize_rows`' rule) by the caller, so that this kernel's prologue never holds more
registers than its loop, and Q K^T runs on FP8 tensor cores over K as stored: no K tile is
widened, at the price of the queries' rounding to 3 mantissa bits. With PV_FP8 no V tile is
widened either: P V runs on FP8 tensor cores over P rounded to e4m3.
"""

from __future__ import annotations

import triton
import triton.language as tl

from widebeam.kernels.attention.triton_common import (
    FP8_P_SCALE,
    fp8_probability_max,
    load_queries,
    probabilities_for_values,
)


@triton.jit
def prefix_kernel(
    q_ptr,  # [R, HQ, D] fp16/bf16/fp32 (QK_FP8: float8_e4m3fn), last dim contiguous
    q_scale_ptr,  # [R, HQ] fp32 contiguous, the FP8 queries' scales (QK_FP8 only)
    k_ptr,  # [slots, HKV, D] q's dtype or float8_e4m3fn (KV_FP8), last dim contiguous
    v_ptr,  # [slots, HKV, D]
    k_scale_ptr,  # [HKV] fp32, the layer's K scales (KV_FP8 only)
    v_scale_ptr,  # [HKV] fp32, its V scales (KV_FP8 only)
    o_part_ptr,  # [num_splits, R, HQ, D] fp32, contiguous
    lse_part_ptr,  # [num_splits, R, HQ] fp32 (log2 units), contiguous
    work_group_ptr,  # [B] int32, -1 = padding item
    work_row_start_ptr,  # [B] int32
    group_row_start_ptr,  # [G] int32
    group_num_rows_ptr,  # [G] int32
    group_prompt_len_ptr,  # [G] int32
    group_table_start_ptr,  # [G] int32, the group's first entry of table_ptr
    table_ptr,  # [E_cap] int32 slot (PAGE == 1) or page ids
    live_splits_ptr,  # [1] int32, prompt chunks per work item (<= the grid's third dim)
    num_rows,  # R
    stride_qr,
    stride_qh,
    stride_ks,
    stride_kh,
    stride_vs,
    stride_vh,
    qk_scale,  # softmax scale * log2(e)
    HQ: tl.constexpr,
    GQA: tl.constexpr,  # q heads per kv head
    GQA_P: tl.constexpr,  # GQA rounded up to a power of two
    D: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_N: tl.constexpr,
    PAGE: tl.constexpr,
    UPCAST: tl.constexpr,  # dot in fp32 (interpreter: its bf16 dot is wrong)
    DOT_PRECISION: tl.constexpr,  # "ieee" for fp32 inputs (tf32 would lose ~3 digits)
    KV_FP8: tl.constexpr,  # K and V stored in FP8 with per-head scales
    KV_DOT: tl.constexpr,  # the dots' dtype over FP8 K and V (KV_FP8 only; QK_FP8: P V's)
    # Q K^T on FP8 tensor cores (KV_FP8 only): q holds the queries quantized per row and head
    # (`quantize_rows`), K is read as stored, the product scaled by both
    QK_FP8: tl.constexpr,
    # P V on FP8 tensor cores (KV_FP8 only): V read as stored, P rounded to e4m3 against an
    # integer running maximum (`triton_common.fp8_probabilities`)
    PV_FP8: tl.constexpr,
):
    item = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    group = tl.load(work_group_ptr + item)
    num_splits = tl.load(live_splits_ptr)
    if (group < 0) | (split >= num_splits):
        return  # padding: the merge kernel reads no partial of it
    g = group
    row0 = tl.load(work_row_start_ptr + item)
    group_end = tl.load(group_row_start_ptr + g) + tl.load(group_num_rows_ptr + g)
    rows_here = tl.minimum(group_end - row0, BLOCK_R)
    prompt_len = tl.load(group_prompt_len_ptr + g)
    table = table_ptr + tl.load(group_table_start_ptr + g)
    # Split the prompt into num_splits chunks of whole BLOCK_N tiles.
    chunk = tl.cdiv(tl.cdiv(prompt_len, num_splits), BLOCK_N) * BLOCK_N
    start = split * chunk
    end = tl.minimum(start + chunk, prompt_len)

    m_idx = tl.arange(0, BLOCK_R * GQA_P)
    head_in_group = m_idx % GQA_P
    row = row0 + m_idx // GQA_P
    head = kv_head * GQA + head_in_group
    m_ok = (m_idx // GQA_P < rows_here) & (head_in_group < GQA)
    d = tl.arange(0, D)
    if KV_FP8:
        qk_scale = qk_scale * tl.load(k_scale_ptr + kv_head)
    if QK_FP8:
        q = load_queries(
            q_ptr, row.to(tl.int64), head, d, m_ok, stride_qr, stride_qh, False, KV_DOT, UPCAST
        )
        q_scale = tl.load(q_scale_ptr + row.to(tl.int64) * HQ + head, mask=m_ok, other=1.0)
        row_scale = q_scale * qk_scale  # [M] fp32: a row's scores are its dots times this
        if D < 32 and not UPCAST:
            # FP8 tensor cores need K >= 32: a narrower head widens both operands (exactly:
            # e4m3 fits KV_DOT), so the scores stay the same
            q = q.to(KV_DOT)
    else:
        q = load_queries(
            q_ptr, row.to(tl.int64), head, d, m_ok, stride_qr, stride_qh, KV_FP8, KV_DOT, UPCAST
        )
    m_i = tl.full([BLOCK_R * GQA_P], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_R * GQA_P], tl.float32)
    acc = tl.zeros([BLOCK_R * GQA_P, D], tl.float32)
    for n0 in range(start, end, BLOCK_N):
        n = n0 + tl.arange(0, BLOCK_N)
        n_ok = n < end
        entry = tl.load(table + n // PAGE, mask=n_ok, other=0)
        slot = entry.to(tl.int64) * PAGE + n % PAGE
        k_t = tl.load(  # [D, BLOCK_N]: K^T straight from the gather
            k_ptr + slot[None, :] * stride_ks + kv_head * stride_kh + d[:, None],
            mask=n_ok[None, :],
            other=0.0,
        )
        v = tl.load(
            v_ptr + slot[:, None] * stride_vs + kv_head * stride_vh + d[None, :],
            mask=n_ok[:, None],
            other=0.0,
        )
        if KV_FP8:
            if not QK_FP8:
                k_t = k_t.to(KV_DOT)
            if not PV_FP8 or BLOCK_N < 32:  # (FP8 tensor cores need K >= 32)
                v = v.to(KV_DOT)
        if QK_FP8 and D < 32:
            k_t = k_t.to(KV_DOT)
        if UPCAST:
            k_t = k_t.to(tl.float32)
        s = tl.dot(q, k_t, input_precision=DOT_PRECISION)
        if QK_FP8:
            s = tl.where(n_ok[None, :], s * row_scale[:, None], float("-inf"))
        else:
            s = tl.where(n_ok[None, :], s * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        if PV_FP8:
            m_new = fp8_probability_max(m_new)
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        # P is rounded to V's dtype as on tensor cores; UPCAST keeps that rounding.
        p_v = probabilities_for_values(p, v, PV_FP8, UPCAST)
        if UPCAST:
            p_v = p_v.to(tl.float32)
            v = v.to(tl.float32)
        pv = tl.dot(p_v, v, input_precision=DOT_PRECISION)
        acc = acc * alpha[:, None] + pv
        m_i = m_new
    has = l_i > 0.0  # false for an empty chunk: zeros and -inf, never 0/0
    out = tl.where(has[:, None], acc / tl.where(has, l_i, 1.0)[:, None], 0.0)
    if KV_FP8:
        out = out * tl.load(v_scale_ptr + kv_head)
    if PV_FP8:
        out = out / FP8_P_SCALE
    lse = tl.where(has, m_i + tl.log2(tl.where(has, l_i, 1.0)), float("-inf"))
    part = (split * num_rows + row.to(tl.int64)) * HQ + head
    tl.store(o_part_ptr + part[:, None] * D + d[None, :], out, mask=m_ok[:, None])
    tl.store(lse_part_ptr + part, lse, mask=m_ok)
