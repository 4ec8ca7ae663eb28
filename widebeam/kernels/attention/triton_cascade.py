"""Two-level (cascade) decode attention in Triton over the slot-addressed KV cache.

Kernel 1 (`triton_prefix.prefix_kernel`): a block of one request's rows × its shared prompt KV
on tensor cores, per prompt split; writes normalised partial outputs and their log-sum-exps.

Kernel 2 (`_suffix_merge_kernel`): one program per (block of BLOCK_R rows, KV head). It folds
in the rows' prompt partials by LSE, then gathers their private suffix slots (short: at most
max_new_tokens) as one [BLOCK_R × BLOCK_S, D] tile and runs the online softmax with dense dots of
all BLOCK_R × GQA queries against the whole tile on tensor cores, masked to the block diagonal
(a query sees only its own row's slots); the wasted products are cheap, the gathers are what
costs. The first tile's slot ids, the partials and q load at once, so a program waits for about
two dependent memory round trips (ids, then K/V) instead of one per step. BLOCK_R = 1 is the old
one-row-per-program kernel.

LSEs inside this module are in log2 units (exp2 is the cheap instruction); nothing outside sees
them. Accumulation is fp32 for every input dtype. An FP8 cache (`kv_scales`) is read as
`triton_prefix` reads it: K and V widened to the dots' dtype (`triton_common.fp8_kv_dot`: the
queries' own here, each suffix tile being read by one row), the head's K scale in the scores'
scale, its V scale on each suffix tile's product (the prompt partials come scaled).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from widebeam.kernels.attention.packed import PackedDecode
from widebeam.kernels.attention.triton_common import (
    LOG2E,
    dot_precision,
    fp8_kv_dot,
    gqa_padded,
    interpreting,
    kv_tile,
    load_queries,
    multiprocessors,
    prefix_tile,
    shared_length,
)
from widebeam.kernels.attention.triton_prefix import prefix_kernel
from widebeam.kernels.attention.triton_shared_suffix import shared_suffix_kernel
from widebeam.kernels.fp8.triton_quantize import quantize_heads_triton
from widebeam.kernels.kv.fp8_kv import KV_FP8_DTYPE, KvScales


@triton.jit
def _merge_partial(m_i, l_i, acc, lse_p, o_p):  # [M], [M], [M, D]; [M] log2 units, [M, D]
    """Fold a normalised partial (o_p, lse_p) into the online-softmax state: as the state
    (m = lse, l = 1, acc = o). An empty partial (lse -inf) changes nothing."""
    m_new = tl.maximum(m_i, lse_p)
    m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)  # both empty: avoid -inf - -inf
    alpha = tl.exp2(m_i - m_ref)
    beta = tl.exp2(lse_p - m_ref)
    return m_new, l_i * alpha + beta, acc * alpha[:, None] + o_p * beta[:, None]


@triton.jit
def _suffix_merge_kernel(
    q_ptr, k_ptr, v_ptr,  # [R, HQ, D]; [slots, HKV, D] x2 (q's dtype, or FP8 with KV_FP8)
    k_scale_ptr, v_scale_ptr,  # [HKV] fp32 each, the layer's scales (KV_FP8 only)
    o_part_ptr, lse_part_ptr,  # [num_splits, R, HQ, D], [num_splits, R, HQ] fp32 (log2 units)
    out_ptr,  # [R, HQ, D] dtype of q, contiguous
    row_group_ptr, row_suffix_len_ptr, suffix_ptr,  # [R] (-1 = padding row), [R], [R, S_cap] i32
    live_splits_ptr,  # [1] int32, the prompt chunks prefix_kernel wrote
    tree_o_ptr, tree_lse_ptr,  # [R, HQ, D], [R, HQ] fp32: shared-suffix partials (TREE only)
    num_rows, suffix_cap,  # R, S_cap
    stride_qr, stride_qh, stride_ks, stride_kh, stride_vs, stride_vh, stride_suffix,
    qk_scale,  # softmax scale * log2(e)
    HQ: tl.constexpr, GQA: tl.constexpr, GQA_P: tl.constexpr, D: tl.constexpr,
    BLOCK_R: tl.constexpr,  # rows per program
    BLOCK_S: tl.constexpr,  # suffix slots per row and tile
    ONE_TILE: tl.constexpr,  # S_cap <= BLOCK_S: the first tile is the only one
    UPCAST: tl.constexpr,  # dot in fp32 (interpreter: its bf16 dot is wrong)
    DOT_PRECISION: tl.constexpr,  # "ieee" for fp32 inputs
    KV_FP8: tl.constexpr,  # K and V stored in FP8 with per-head scales
    KV_DOT: tl.constexpr,  # the dots' dtype over FP8 K and V (KV_FP8 only)
    TREE: tl.constexpr,  # suffixes start with a shared part that shared_suffix_kernel read
    PRIVATE_MIN: tl.constexpr,  # suffix_tree's split rule (TREE only)
    ALIGN: tl.constexpr,
):  # fmt: skip
    kv_head = tl.program_id(1)
    v_scale = 1.0
    if KV_FP8:
        qk_scale = qk_scale * tl.load(k_scale_ptr + kv_head)
        v_scale = tl.load(v_scale_ptr + kv_head)
    row0 = tl.program_id(0).to(tl.int64) * BLOCK_R
    # M: the block's queries (row, q head); N: its (row, suffix slot) pairs.
    m_idx = tl.arange(0, BLOCK_R * GQA_P)
    m_row = row0 + m_idx // GQA_P
    head = kv_head * GQA + m_idx % GQA_P
    m_ok = (m_row < num_rows) & (m_idx % GQA_P < GQA)
    live = tl.load(row_group_ptr + m_row, mask=m_ok, other=-1) >= 0
    n_idx = tl.arange(0, BLOCK_R * BLOCK_S)
    n_row = row0 + n_idx // BLOCK_S
    n_ok = n_row < num_rows
    n_live = tl.load(row_group_ptr + n_row, mask=n_ok, other=-1) >= 0
    n_len = tl.where(n_live, tl.load(row_suffix_len_ptr + n_row, mask=n_ok, other=0), 0)
    n_s = n_idx % BLOCK_S
    same_row = (m_idx // GQA_P)[:, None] == (n_idx // BLOCK_S)[None, :]
    # Where each row's private suffix starts: 0, or after the part read per ancestor group.
    n_start = 0
    if TREE:
        n_start = shared_length(n_len, PRIVATE_MIN, ALIGN)
    # First tile's slots now: without TREE they wait on no other load (masked by S_cap, not
    # the row length).
    suffix_row = suffix_ptr + n_row * stride_suffix
    s_idx = n_start + n_s
    slot = tl.load(suffix_row + s_idx, mask=n_ok & (s_idx < suffix_cap), other=0)
    d = tl.arange(0, D)
    q = load_queries(q_ptr, m_row, head, d, m_ok, stride_qr, stride_qh, KV_FP8, KV_DOT, UPCAST)
    # A prompt partial is a normalised state (out, lse): merge it as (m = lse, l = 1, acc = out).
    # Padding rows have none (never written: masked after the load, which then waits on nothing).
    # The first split is outside the loop (every batch has one): its loads issue with the
    # first suffix tile's, as they would if the split count were a compile-time 1.
    out_idx = m_row * HQ + head
    lse_p = tl.load(lse_part_ptr + out_idx, mask=m_ok, other=float("-inf"))
    o_p = tl.load(o_part_ptr + out_idx[:, None] * D + d[None, :], mask=m_ok[:, None], other=0.0)
    m_i = tl.where(live, lse_p, float("-inf"))
    l_i = tl.where(m_i == float("-inf"), 0.0, 1.0)
    acc = tl.where((l_i > 0.0)[:, None], o_p, 0.0)
    num_splits = tl.load(live_splits_ptr)
    for sp in range(1, num_splits):
        part = sp * num_rows * HQ + out_idx
        lse_p = tl.load(lse_part_ptr + part, mask=m_ok, other=float("-inf"))
        o_p = tl.load(o_part_ptr + part[:, None] * D + d[None, :], mask=m_ok[:, None], other=0.0)
        lse_p = tl.where(live, lse_p, float("-inf"))
        o_p = tl.where(live[:, None], o_p, 0.0)
        m_i, l_i, acc = _merge_partial(m_i, l_i, acc, lse_p, o_p)
    if TREE:  # the shared part's partial, as one more split (rows that have one)
        m_len = tl.load(row_suffix_len_ptr + m_row, mask=m_ok, other=0)
        m_tree = live & (shared_length(m_len, PRIVATE_MIN, ALIGN) > 0)
        lse_p = tl.load(tree_lse_ptr + out_idx, mask=m_tree, other=float("-inf"))
        o_p = tl.load(
            tree_o_ptr + out_idx[:, None] * D + d[None, :], mask=m_tree[:, None], other=0.0
        )
        m_i, l_i, acc = _merge_partial(m_i, l_i, acc, lse_p, o_p)
    m_i, l_i, acc = kv_tile(
        q, m_i, l_i, acc, slot, k_ptr, v_ptr, kv_head, stride_ks, stride_kh, stride_vs,
        stride_vh, qk_scale, v_scale, s_idx < n_len, same_row, D, UPCAST, DOT_PRECISION, KV_FP8,
        KV_DOT,
    )  # fmt: skip
    if not ONE_TILE:
        for s0 in range(BLOCK_S, tl.max(n_len - n_start, 0), BLOCK_S):
            s_idx = n_start + s0 + n_s
            slot = tl.load(suffix_row + s_idx, mask=n_ok & (s_idx < suffix_cap), other=0)
            m_i, l_i, acc = kv_tile(
                q, m_i, l_i, acc, slot, k_ptr, v_ptr, kv_head, stride_ks, stride_kh, stride_vs,
                stride_vh, qk_scale, v_scale, s_idx < n_len, same_row, D, UPCAST, DOT_PRECISION,
                KV_FP8, KV_DOT,
            )  # fmt: skip
    has = l_i > 0.0  # padding rows and rows with no KV at all get zeros, not NaN
    out = tl.where(has[:, None], acc / tl.where(has, l_i, 1.0)[:, None], 0.0)
    tl.store(
        out_ptr + out_idx[:, None] * D + d[None, :],
        out.to(out_ptr.dtype.element_ty),
        mask=m_ok[:, None],
    )


SUFFIX_TILE = 16  # suffix slots per row and tile at most
SHARED_TILE = 32  # shared-suffix slots per tile (shared lengths are multiples of ALIGN)
# The persistent grid's size: programs per SM launched, of which registers let a few run at a
# time (the rest start as those finish; the sweep: `bench/kernels.py --only tree`).
SHARED_PROGRAMS_PER_SM = 16
# An item is a chain of dependent loads (plan, rows, slots, K/V), hidden by the programs resident
# on an SM: the compiler gives the kernel 168 registers a thread, which lets 3 reside; 96 lets 5,
# and the latency they hide outweighs the few spills the cap costs (`bench/kernels.py --only
# tree --shared-registers`; 0 there is the compiler's own count).
SHARED_MAX_REGISTERS = 96
SUFFIX_MIN_PROGRAMS = 1024  # fewer rows per program while the grid is smaller (~8 per SM)


def suffix_tiles(
    rows: int,
    kv_heads: int,
    gqa_p: int,
    suffix_cap: int,
    rows_per_program: int | None = None,
    block_s: int | None = None,
    tensor_cores: bool = True,
) -> tuple[int, int]:
    """(BLOCK_R, BLOCK_S) of the suffix kernel, from shapes only (CUDA graphs). Default BLOCK_R:
    M = BLOCK_R × GQA_P = 8 (the fastest in the H200 sweep of `bench/kernels.py`, ahead of 16:
    smaller tiles keep more programs resident per SM), halved while the grid would have fewer than
    SUFFIX_MIN_PROGRAMS programs; 1 without tensor cores (fp32: the block-diagonal waste would
    run on CUDA cores). BLOCK_S: up to the suffix capacity, raised so that BLOCK_R × BLOCK_S
    >= 16 (the PV dot's K dimension)."""
    block_r = rows_per_program or (max(1, 8 // gqa_p) if tensor_cores else 1)
    while rows_per_program is None and block_r > 1:
        if triton.cdiv(rows, block_r) * kv_heads >= SUFFIX_MIN_PROGRAMS:
            break
        block_r //= 2
    block_s = min(block_s or SUFFIX_TILE, triton.next_power_of_2(max(suffix_cap, 1)))
    if block_r <= 0 or block_r & (block_r - 1) or block_s & (block_s - 1):
        raise ValueError(f"rows_per_program {block_r} and block_s {block_s} must be powers of 2")
    return block_r, max(block_s, 16 // block_r)


def cascade_decode_packed(
    q: torch.Tensor,  # [R, Hq, D]
    k_cache: torch.Tensor,  # [slots, Hkv, D] one layer
    v_cache: torch.Tensor,  # [slots, Hkv, D]
    packed: PackedDecode,
    scale: float,
    kv_scales: KvScales | None = None,  # an FP8 cache's scales (the layer's)
    *,
    out: torch.Tensor | None = None,  # [R, Hq, D] contiguous, dtype of q (static buffer)
    # The prefix kernel's tile (None: `prefix_tile`'s for the batch's M).
    block_n: int | None = None,
    prefix_warps: int | None = None,
    prefix_stages: int | None = None,
    prefix_max_registers: int | None = None,  # per thread (Triton's maxnreg)
    # Suffix kernel tiles and launch options (None: `suffix_tiles`' and Triton's defaults).
    block_s: int | None = None,
    rows_per_program: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
    # Shared-suffix kernel options (None: SHARED_TILE, SHARED_PROGRAMS_PER_SM, 4 warps,
    # SHARED_MAX_REGISTERS; 0 registers: the compiler's).
    shared_block_n: int | None = None,
    shared_programs_per_sm: int | None = None,
    shared_warps: int | None = None,
    shared_max_registers: int | None = None,  # per thread (Triton's maxnreg)
    fp8_dot: torch.dtype | None = None,  # the prefix kernel's FP8 dots (None: `fp8_kv_dot`)
    # The prefix kernel's Q K^T on FP8 tensor cores, the queries quantized per row and head
    # (`triton_prefix`'s QK_FP8; an FP8 cache only); fp8_dot is then P V's dtype. The engine's
    # `kv_fp8_queries`, off by default until bench/fp8_quality.py has measured what the
    # queries' rounding costs
    fp8_queries: bool = False,
    # The prefix kernel's P V on FP8 tensor cores over V as stored (`triton_prefix`'s PV_FP8;
    # an FP8 cache only): the engine's `kv_fp8_probabilities`
    fp8_probabilities: bool = False,
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
    for flag, on in (("fp8_queries", fp8_queries), ("fp8_probabilities", fp8_probabilities)):
        if on and kv_scales is None:
            raise ValueError(f"{flag} needs an FP8 cache (kv_scales)")
    kv_dtype = q.dtype if kv_scales is None else KV_FP8_DTYPE
    if k_cache.dtype != kv_dtype or v_cache.dtype != kv_dtype:
        raise ValueError(
            f"q is {q.dtype}, kv_scales {'given' if kv_scales else 'none'}, but the cache is "
            f"{k_cache.dtype}/{v_cache.dtype}"
        )
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
    fp8 = kv_scales is not None
    common = dict(HQ=q_heads, GQA=q_heads // kv_heads, GQA_P=gqa_p, D=dim)
    # Suffix tiles (one row reads each), and every kernel over a cache in q's dtype, where the
    # constexpr is unread: one compiled variant, not one per choice the FP8 rule would make
    own_dot = fp8_kv_dot(q.dtype, widenings=1)
    k_scale, v_scale = (kv_scales.k, kv_scales.v) if fp8 else (k_cache, v_cache)  # unread if not
    items, groups = packed.work_group.shape[0], max(packed.group_num_rows.shape[0], 1)
    if items:
        tile = prefix_tile(packed.block_rows * gqa_p, k_cache.dtype)
        prompt_q, prompt_q_scale = q, q  # the scales are read with fp8_queries only
        if fp8_queries:  # [R, Hq, D] e4m3 and [R, Hq] fp32, each (row, head) a row's scale
            prompt_q, prompt_q_scale = quantize_heads_triton(q)
        prefix_kernel[(items, kv_heads, splits)](
            prompt_q, prompt_q_scale, k_cache, v_cache, k_scale, v_scale, o_part, lse_part,
            packed.work_group, packed.work_row_start, packed.group_row_start,
            packed.group_num_rows, packed.group_prompt_len, packed.group_table_start,
            packed.group_prompt_table, packed.live_splits,
            rows, prompt_q.stride(0), prompt_q.stride(1), k_cache.stride(0), k_cache.stride(1),
            v_cache.stride(0), v_cache.stride(1), qk_scale,
            BLOCK_R=packed.block_rows, BLOCK_N=block_n or tile.block_n, PAGE=packed.page_size,
            UPCAST=interpreting(prefix_kernel), DOT_PRECISION=dot_precision(q.dtype), KV_FP8=fp8,
            KV_DOT=fp8_kv_dot(q.dtype, -(-items // groups), fp8_dot) if fp8 else own_dot,
            QK_FP8=fp8_queries, PV_FP8=fp8_probabilities, **common,
            **launch_options(
                prefix_warps or tile.warps,
                prefix_stages or tile.stages,
                prefix_max_registers or tile.max_registers,
            ),
        )  # fmt: skip
    suffix_cap = packed.row_suffix_slots.shape[1]
    tree = packed.tree
    tree_o, tree_lse = o_part, lse_part  # unread without a plan
    if tree is not None:
        if tree.block_rows * gqa_p < 16 or tree.block_rows & (tree.block_rows - 1):
            raise ValueError("the plan's rows per item must be a power of two, times gqa >= 16")
        tree_o = torch.empty((rows, q_heads, dim), dtype=torch.float32, device=q.device)
        tree_lse = torch.empty((rows, q_heads), dtype=torch.float32, device=q.device)
        programs = shared_suffix_programs(rows, kv_heads, q.device, shared_programs_per_sm)
        registers = SHARED_MAX_REGISTERS if shared_max_registers is None else shared_max_registers
        shared_registers = registers or None  # 0: the compiler's own count
        shared_suffix_kernel[(programs, kv_heads)](
            q, k_cache, v_cache, k_scale, v_scale, tree_o, tree_lse,
            tree.order, tree.key, tree.items, tree.num_items,
            packed.row_suffix_len, packed.row_suffix_slots,
            rows, q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1),
            v_cache.stride(0), v_cache.stride(1), packed.row_suffix_slots.stride(0), qk_scale,
            BLOCK_R=tree.block_rows, BLOCK_N=shared_block_n or SHARED_TILE,
            PRIVATE_MIN=tree.rule.private_min, ALIGN=tree.rule.align,
            UPCAST=interpreting(shared_suffix_kernel),
            DOT_PRECISION=dot_precision(q.dtype), KV_FP8=fp8, KV_DOT=own_dot,
            **common, **launch_options(shared_warps or 4, None, shared_registers),
        )  # fmt: skip
    # With a plan a row reads at most the rule's longest private tail itself.
    private_cap = suffix_cap if tree is None else min(suffix_cap, tree.rule.longest_private)
    block_r, block_s = suffix_tiles(
        rows, kv_heads, gqa_p, private_cap, rows_per_program, block_s, q.dtype != torch.float32
    )
    one_tile = private_cap <= block_s
    launch = launch_options(num_warps or 4, num_stages)
    _suffix_merge_kernel[(triton.cdiv(rows, block_r), kv_heads)](
        q, k_cache, v_cache, k_scale, v_scale, o_part, lse_part, out,
        packed.row_group, packed.row_suffix_len, packed.row_suffix_slots, packed.live_splits,
        tree_o, tree_lse,
        rows, suffix_cap, q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1),
        v_cache.stride(0), v_cache.stride(1), packed.row_suffix_slots.stride(0),
        qk_scale, BLOCK_R=block_r, BLOCK_S=block_s, ONE_TILE=one_tile,
        UPCAST=interpreting(_suffix_merge_kernel), DOT_PRECISION=dot_precision(q.dtype),
        KV_FP8=fp8, KV_DOT=own_dot, TREE=tree is not None,
        PRIVATE_MIN=tree.rule.private_min if tree else 0, ALIGN=tree.rule.align if tree else 1,
        **common, **launch,
    )  # fmt: skip
    return out


def shared_suffix_programs(
    rows: int, kv_heads: int, device: torch.device, per_sm: int | None = None
) -> int:
    """Programs per KV head of the persistent shared-suffix grid: `per_sm`
    (SHARED_PROGRAMS_PER_SM) per SM in all (fixed per row count and device, so a CUDA graph's
    grid fits every batch of its bucket); a few on the CPU, where the interpreter runs them one
    by one."""
    sms = multiprocessors(device)
    if sms == 0:
        return max(1, min(rows, 3))
    return max(1, min(rows, -(-(per_sm or SHARED_PROGRAMS_PER_SM) * sms // kv_heads)))


def launch_options(
    num_warps: int | None, num_stages: int | None, max_registers: int | None = None
) -> dict[str, int]:
    """A kernel launch's warps, stages and registers per thread, those given (None: Triton's
    default)."""
    given = {"num_warps": num_warps, "num_stages": num_stages, "maxnreg": max_registers}
    return {key: value for key, value in given.items() if value is not None}
