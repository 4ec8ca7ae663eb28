"""Shared helpers of the Triton attention kernels: tile choices, precision, interpreter check."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from widebeam.kernels.attention.fp8_probabilities import FP8_P_SCALE as FP8_P_SCALE_VALUE
from widebeam.kernels.fp8.triton_quantize import round_to_e4m3

LOG2E = 1.4426950408889634  # kernels work in log2 units: exp2 is the cheap instruction


def interpreting(kernel: object) -> bool:
    """True under TRITON_INTERPRET=1 (the kernel was decorated as an InterpretedFunction).
    The interpreter's tl.dot reads bf16 as raw integers, so kernels upcast operands there."""
    return not isinstance(kernel, triton.runtime.JITFunction)


def dot_precision(dtype: torch.dtype) -> str:
    """fp32 engines are the accuracy reference: keep their dots exact. Ignored for bf16/fp16."""
    return "ieee" if dtype == torch.float32 else "tf32"


# The largest finite fp16 value: queries beyond it are clamped before an FP8 tile's fp16 dot.
FP16_MAX = tl.constexpr(65504.0)
_TL_DTYPES = {torch.float16: tl.float16, torch.bfloat16: tl.bfloat16, torch.float32: tl.float32}


# A prompt tile of an FP8 cache is widened once per prefix work item that reads it. From this many
# items per group (shapes of the launch) the prefix kernel's dots run in fp16, below it in the
# queries' dtype, where fp16 measured slower (`bench/kernels.py --only fp8kv`; the table in
# docs/benchmarks.md). A CUDA graph's launch counts its bucket's capacities, one group per row,
# so captured decodes always take the queries' dtype: fp16 there, or chosen per item in the
# kernel, lost end to end (docs/benchmarks.md, thirty-seventh session). The merge and
# shared-suffix kernels read each tile for one row or one item: they keep the queries' dtype.
FP16_DOTS_FROM_WIDENINGS = 4


def fp8_kv_dot(
    q_dtype: torch.dtype, widenings: int, override: torch.dtype | None = None
) -> tl.dtype:
    """The dtype of a kernel's dots over FP8 KV tiles (its K and V widened to it, the queries
    and the probabilities cast to it): fp16 for 16-bit queries when each tile is widened at
    least FP16_DOTS_FROM_WIDENINGS times, else the queries' dtype. e4m3 widens to fp16 with
    fewer instructions than to bf16 (every e4m3 value is exact in either); fp16 also keeps P
    to 11 bits where bf16 keeps 8, and a bf16 query is exact in fp16 within its range
    (`fp8_dot_queries` clamps to it). `override`: this dtype
    instead (bench/kernels.py's comparison)."""
    dtype = override or q_dtype
    if override is None and q_dtype != torch.float32 and widenings >= FP16_DOTS_FROM_WIDENINGS:
        dtype = torch.float16
    if dtype not in _TL_DTYPES:
        raise ValueError(f"no FP8 KV dot in {dtype}")
    return _TL_DTYPES[dtype]


@triton.jit
def fp8_dot_queries(q, KV_DOT: tl.constexpr):
    """Queries as the dots over FP8 tiles take them: in KV_DOT, clamped to fp16's range when
    that is fp16 (a bf16 query beyond it, never seen from a normed model, stays finite)."""
    if tl.float16 == KV_DOT:
        q = tl.minimum(tl.maximum(q.to(tl.float32), -FP16_MAX), FP16_MAX)
    return q.to(KV_DOT)


@triton.jit
def load_queries(
    q_ptr, row, head, d, ok, stride_qr, stride_qh,
    KV_FP8: tl.constexpr, KV_DOT: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    """[M, D] the queries of M (row [M] int, head [M]) pairs, 0 where not `ok`, as a decode
    kernel's dots take them: `fp8_dot_queries` over an FP8 cache, fp32 in the interpreter
    (UPCAST: its bf16 dot is wrong)."""
    q = tl.load(
        q_ptr + row[:, None] * stride_qr + head[:, None] * stride_qh + d[None, :],
        mask=ok[:, None],
        other=0.0,
    )
    if KV_FP8:
        q = fp8_dot_queries(q, KV_DOT)
    if UPCAST:
        q = q.to(tl.float32)
    return q


# FP8 probabilities (`fp8_probabilities.py`): a row's running maximum (log2 units) rounded up to
# an integer, P times FP8_P_SCALE cast to e4m3, the output divided by that scale again.
FP8_P_SCALE = tl.constexpr(FP8_P_SCALE_VALUE)


@triton.jit
def fp8_probability_max(m):
    """A running row maximum as FP8 probabilities take it: rounded up to an integer."""
    return tl.ceil(m)


@triton.jit
def fp8_probabilities(p, ROUND_IN_FP32: tl.constexpr):
    """[M, N] probabilities (at most 1) as e4m3 values times FP8_P_SCALE. ROUND_IN_FP32: rounded
    in fp32 first, where the cast itself does not round to nearest even (the interpreter)."""
    scaled = p * FP8_P_SCALE
    if ROUND_IN_FP32:
        scaled = round_to_e4m3(scaled)
    return scaled.to(tl.float8e4nv)


@triton.jit
def probabilities_for_values(p, v, PV_FP8: tl.constexpr, ROUND_IN_FP32: tl.constexpr):
    """[M, N] probabilities as P V's dot takes them: in V's dtype, after rounding to FP8
    probabilities with PV_FP8 (exact where V's tile was widened from e4m3 for a dot too
    narrow for FP8 tensor cores)."""
    if PV_FP8:
        p = fp8_probabilities(p, ROUND_IN_FP32)
    return p.to(v.dtype)


def gqa_padded(q_heads: int, kv_heads: int) -> int:
    if q_heads % kv_heads:
        raise ValueError(f"{q_heads} query heads are not a multiple of {kv_heads} kv heads")
    return triton.next_power_of_2(q_heads // kv_heads)


# The prefix kernel's tiles (`bench/kernels.py --only prefix`; docs/benchmarks.md has the
# sweep): a work item's M (its rows × the padded GQA group) reaches PREFIX_MAX_M for wide
# requests, and each (M, cache dtype) launches with the tile PREFIX_TILES gives it (else
# PrefixTile()). Over a bf16 cache 32-token tiles beat 64 at every workload shape swept; over
# FP8 no tile beat the default at every shape (M = 128 won at W4's and lost at W2's).
# FP8 queries (Q K^T on FP8 tensor cores) take items of PREFIX_WIDE_M where the batch still
# gives every SM a program (`prefix_block_rows`): on the H100 that ran their prefix kernel
# 1.10-1.37x faster than items of 64 at W3 / W4 shapes, and 0.82x at W2's 256 rows (few items).
PREFIX_MAX_M = 64
PREFIX_WIDE_M = 128


@dataclass(frozen=True)
class PrefixTile:
    block_n: int = 64  # prompt tokens a loop iteration reads
    warps: int | None = None  # None: Triton's defaults
    stages: int | None = None
    # Registers a thread may hold (Triton's maxnreg; None: the compiler's choice). 128 at 4 warps
    # lets an SM hold 4 blocks (bench/kernel_resources.py shows what each tile compiles to).
    max_registers: int | None = None


PREFIX_TILES: dict[tuple[int, torch.dtype], PrefixTile] = {
    (64, torch.bfloat16): PrefixTile(block_n=32, warps=4, stages=3),
}


def prefix_tile(m: int, kv_dtype: torch.dtype) -> PrefixTile:
    return PREFIX_TILES.get((m, kv_dtype), PrefixTile())


def default_block_rows(q_heads: int, kv_heads: int, max_group_rows: int) -> int:
    """Rows per prefix block: M = rows × padded GQA in [16, PREFIX_MAX_M]; fewer rows for small
    groups so k = 1 requests do not pay for wide tiles."""
    gqa_p = gqa_padded(q_heads, kv_heads)
    want = triton.next_power_of_2(max(max_group_rows, 1))
    return max(16 // gqa_p, 1, min(want, max(PREFIX_MAX_M // gqa_p, 1)))


def prefix_block_rows(
    q_heads: int,
    kv_heads: int,
    rows: int,  # of the batch (or of a CUDA-graph bucket)
    widest: int,  # rows of its widest request (a bucket: its rows)
    wide_items: bool,  # FP8 queries over an FP8 cache
    sms: int,  # the GPU's multiprocessors (0: none, never the wide items)
) -> int:
    """Rows per prefix work item: `default_block_rows`, or with `wide_items` PREFIX_WIDE_M's
    rows where items of PREFIX_MAX_M were chosen and `rows` rows in items of PREFIX_WIDE_M still
    make a program (an item x a KV head) per SM. A bucket's smaller batches make nearly as many:
    a bucket of more than 1,024 rows holds more than its rows minus 512."""
    base = default_block_rows(q_heads, kv_heads, widest)
    gqa_p = gqa_padded(q_heads, kv_heads)
    wide = max(PREFIX_WIDE_M // gqa_p, 1)
    fills = sms > 0 and rows // wide * kv_heads >= sms
    return wide if wide_items and base * gqa_p >= PREFIX_MAX_M and fills else base


def multiprocessors(device: torch.device) -> int:
    """The device's SMs; 0 off CUDA."""
    if device.type != "cuda":
        return 0
    return torch.cuda.get_device_properties(device).multi_processor_count


def default_num_splits(programs: int, max_prompt_len: int, device: torch.device) -> int:
    """Split long prompts until the prefix grid fills the GPU (~2 waves), keeping >= 256
    tokens per split so the extra partials stay cheap."""
    sms = multiprocessors(device)
    if sms == 0 or programs <= 0:
        return 1
    return max(1, min(math.ceil(2 * sms / programs), max_prompt_len // 256))


@triton.jit
def kv_tile(
    q, m_i, l_i, acc, slot, k_ptr, v_ptr, kv_head, stride_ks, stride_kh, stride_vs, stride_vh,
    qk_scale, v_scale, kv_ok, same_row,
    D: tl.constexpr, UPCAST: tl.constexpr, DOT_PRECISION: tl.constexpr, KV_FP8: tl.constexpr,
    KV_DOT: tl.constexpr,  # an FP8 tile's dot dtype (`fp8_kv_dot`; q already in it)
):  # fmt: skip
    """One tile of N gathered KV slots against M queries: dense dots on tensor cores, the pairs
    `same_row & kv_ok` kept (the suffix kernel's block diagonal, or all pairs). Updates the
    online-softmax state (m_i, l_i, acc); an FP8 tile's product gets its V scale."""
    d = tl.arange(0, D)
    slot = slot.to(tl.int64)
    k_t = tl.load(  # [D, N]: K^T straight from the gather
        k_ptr + slot[None, :] * stride_ks + kv_head * stride_kh + d[:, None],
        mask=kv_ok[None, :],
        other=0.0,
    )
    v = tl.load(
        v_ptr + slot[:, None] * stride_vs + kv_head * stride_vh + d[None, :],
        mask=kv_ok[:, None],
        other=0.0,
    )
    if KV_FP8:
        k_t = k_t.to(KV_DOT)
        v = v.to(KV_DOT)
    if UPCAST:
        k_t = k_t.to(tl.float32)
    s = tl.dot(q, k_t, input_precision=DOT_PRECISION)
    s = tl.where(same_row & kv_ok[None, :], s * qk_scale, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)  # a query with no key so far
    alpha = tl.exp2(m_i - m_ref)
    p = tl.exp2(s - m_ref[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    p_v = p.to(v.dtype)  # rounded to V's dtype as on tensor cores (as in prefix_kernel)
    if UPCAST:
        p_v = p_v.to(tl.float32)
        v = v.to(tl.float32)
    pv = tl.dot(p_v, v, input_precision=DOT_PRECISION)
    if KV_FP8:
        pv = pv * v_scale
    acc = acc * alpha[:, None] + pv
    return m_new, l_i, acc


@triton.jit
def shared_length(length, PRIVATE_MIN: tl.constexpr, ALIGN: tl.constexpr):
    """`suffix_tree.SplitRule.shared_length` inside a kernel: the generated tokens of a row of
    `length` read through its ancestor group (0: none)."""
    return (tl.maximum(length - PRIVATE_MIN, 0) // ALIGN) * ALIGN
