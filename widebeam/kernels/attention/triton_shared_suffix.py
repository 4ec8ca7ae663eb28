"""Decode kernel 1b of the cascade: rows of one ancestor group against their shared suffix.

`suffix_tree.plan_suffix_tree` sorts a step's rows by the slot they hold at the last shared
depth; each work item is up to BLOCK_R consecutive sorted rows of one group. Their queries (× the
GQA group's heads) form the M dimension of `tl.dot` against the group's shared generated-token
KV (the leader row's suffix slots 0 .. shared_length - 1), read once per item instead of once
per row. Like `prefix_kernel` it writes a normalised partial output and its log2-unit
log-sum-exp per (row, head), which `triton_cascade._suffix_merge_kernel` folds in before the
row's private tokens.

The item count lives on the device (the plan never reads back), so the grid is persistent:
a fixed number of programs per KV head walk the items in strides.
"""

from __future__ import annotations

import triton
import triton.language as tl

from widebeam.kernels.attention.triton_common import kv_tile, load_queries, shared_length


@triton.jit
def shared_suffix_kernel(
    q_ptr,  # [R, HQ, D] fp16/bf16/fp32, last dim contiguous
    k_ptr,  # [slots, HKV, D] q's dtype or float8_e4m3fn (KV_FP8), last dim contiguous
    v_ptr,  # [slots, HKV, D]
    k_scale_ptr,  # [HKV] fp32 (KV_FP8 only)
    v_scale_ptr,  # [HKV] fp32 (KV_FP8 only)
    o_ptr,  # [R, HQ, D] fp32: normalised partial of the rows with a shared part
    lse_ptr,  # [R, HQ] fp32, log2 units
    order_ptr,  # [R] int32, row at each sorted position
    key_ptr,  # [R] int32, sorted ancestor slot of each position
    items_ptr,  # [R] int32, first sorted position of each item
    num_items_ptr,  # [1] int32
    row_suffix_len_ptr,  # [R] int32
    suffix_ptr,  # [R, S_cap] int32 slots, oldest first
    num_rows,  # R
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
    BLOCK_R: tl.constexpr,  # rows per item (the plan's block_rows)
    BLOCK_N: tl.constexpr,  # shared slots per tile
    PRIVATE_MIN: tl.constexpr,  # suffix_tree's split rule
    ALIGN: tl.constexpr,
    UPCAST: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    KV_FP8: tl.constexpr,
    KV_DOT: tl.constexpr,  # the dots' dtype over FP8 K and V (KV_FP8 only)
):
    kv_head = tl.program_id(1)
    v_scale = 1.0
    if KV_FP8:
        qk_scale = qk_scale * tl.load(k_scale_ptr + kv_head)
        v_scale = tl.load(v_scale_ptr + kv_head)
    m_idx = tl.arange(0, BLOCK_R * GQA_P)
    every_query = (m_idx >= 0)[:, None]  # [M, 1]: all rows of an item read the whole path
    head = kv_head * GQA + m_idx % GQA_P
    head_ok = m_idx % GQA_P < GQA
    d = tl.arange(0, D)
    n_off = tl.arange(0, BLOCK_N)
    num_items = tl.load(num_items_ptr)
    for item in range(tl.program_id(0), num_items, tl.num_programs(0)):
        first = tl.load(items_ptr + item)
        position = first + m_idx // GQA_P
        in_range = position < num_rows
        key = tl.load(key_ptr + first)
        member = in_range & (tl.load(key_ptr + position, mask=in_range, other=-1) == key)
        row = tl.load(order_ptr + position, mask=member, other=0).to(tl.int64)
        leader = tl.load(order_ptr + first).to(tl.int64)
        length = tl.load(row_suffix_len_ptr + leader)
        shared = shared_length(length, PRIVATE_MIN, ALIGN)
        m_ok = member & head_ok
        q = load_queries(q_ptr, row, head, d, m_ok, stride_qr, stride_qh, KV_FP8, KV_DOT, UPCAST)
        m_i = tl.full([BLOCK_R * GQA_P], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_R * GQA_P], tl.float32)
        acc = tl.zeros([BLOCK_R * GQA_P, D], tl.float32)
        for n0 in range(0, shared, BLOCK_N):
            n = n0 + n_off
            n_ok = n < shared
            slot = tl.load(suffix_ptr + leader * stride_suffix + n, mask=n_ok, other=0)
            m_i, l_i, acc = kv_tile(
                q, m_i, l_i, acc, slot, k_ptr, v_ptr, kv_head, stride_ks, stride_kh, stride_vs,
                stride_vh, qk_scale, v_scale, n_ok, every_query, D, UPCAST, DOT_PRECISION,
                KV_FP8, KV_DOT,
            )  # fmt: skip
        out = acc / l_i[:, None]  # shared >= ALIGN slots: every query saw a key
        index = row * HQ + head
        tl.store(o_ptr + index[:, None] * D + d[None, :], out, mask=m_ok[:, None])
        tl.store(lse_ptr + index, m_i + tl.log2(l_i), mask=m_ok)
