"""Ragged (varlen) causal prefill attention in Triton, flash-attention style.

Segments are packed back to back (`cu_seqlens`); each program takes one block of BLOCK_Q query
tokens of one segment × one KV head, with the GQA group's query heads stacked into the M
dimension (as in the decode prefix kernel), and streams that segment's keys up to the block's
last token. K and V come from this batch's fresh k, v (the engine writes the cache separately).
With FP8 KV (`kv_scales`) they are FP8 values, read as `triton_prefix` reads the cache: in q's
dtype, the head's K scale in the scores' scale, its V scale on the output. The engine's come
already widened to q's dtype by the KV write (`KVCache.write_rows`); FP8 tensors are widened
once, before the kernel, rather than in it: each K/V tile is read by every query block after it
(dozens of times for a long prompt), and on Hopper the e4m3 conversion is several instructions
an element, so in the loop it cost W2 at 5,000 tokens more than FP8 saved elsewhere. The values
are the same every way (every e4m3 value is one of q's dtype). With FP8 queries (the engine's
`kv_fp8_queries`) K stays in FP8 and the queries are quantized per token and head before the
kernel, so Q K^T runs on FP8 tensor cores; with FP8 probabilities (`kv_fp8_probabilities`) V
stays in FP8 and P is rounded to e4m3 (`triton_common.fp8_probabilities`), so P V does too.
"""

from __future__ import annotations

import itertools

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from widebeam.kernels.attention.triton_common import (
    FP8_P_SCALE,
    LOG2E,
    dot_precision,
    fp8_probability_max,
    gqa_padded,
    interpreting,
    probabilities_for_values,
)
from widebeam.kernels.fp8.triton_quantize import quantize_heads_triton
from widebeam.kernels.kv.fp8_kv import KV_FP8_DTYPE, KvScales


@triton.jit
def _kv_tiles(
    k_src, v_src, n0, kv_head, kv_end, stride_kt, stride_kh, stride_vt, stride_vh,
    D: tl.constexpr, BLOCK_N: tl.constexpr, TMA: tl.constexpr, V_T: tl.constexpr,
):  # fmt: skip
    """Keys n0 .. n0 + BLOCK_N of one KV head: [BLOCK_N] their indices, [D, BLOCK_N] K^T,
    [BLOCK_N, D] V. TMA: k_src / v_src are [N, Hkv * D] tensor descriptors (keys past the
    batch read as zeros, keys of the next segment as they are: the caller masks them), else
    pointers, keys from kv_end on read as zeros. V_T: v_src holds V transposed, [Hkv, D, N']
    (stride_vh, stride_vt: its head and dimension strides; with TMA a [Hkv * D, N']
    descriptor), keys contiguous as FP8 tensor cores take P V's second operand."""
    if V_T:
        n0 = tl.multiple_of(n0, 16)  # the caller's tiles start 16-aligned
    n = n0 + tl.arange(0, BLOCK_N)
    if TMA:
        k_t = k_src.load([n0, kv_head * D]).T
        v = v_src.load([kv_head * D, n0]).T if V_T else v_src.load([n0, kv_head * D])
    else:
        d = tl.arange(0, D)
        n_ok = n < kv_end
        k_t = tl.load(
            k_src + n.to(tl.int64)[None, :] * stride_kt + kv_head * stride_kh + d[:, None],
            mask=n_ok[None, :],
            other=0.0,
        )
        if V_T:  # unmasked, so 16 keys load as one vector: `keys_contiguous` pads a tile past N
            v = tl.load(
                v_src + kv_head * stride_vh + d[:, None] * stride_vt + n.to(tl.int64)[None, :]
            ).T
        else:
            v = tl.load(
                v_src + n.to(tl.int64)[:, None] * stride_vt + kv_head * stride_vh + d[None, :],
                mask=n_ok[:, None],
                other=0.0,
            )
    return n, k_t, v


@triton.jit
def _attend_tile(
    q, k_t, v, n, tok, seg_start, kv_end, qk_scale, row_scale, acc, m_i, l_i,
    MASKED: tl.constexpr, KV_FP8: tl.constexpr, QK_FP8: tl.constexpr, PV_FP8: tl.constexpr,
    Q_DTYPE: tl.constexpr, UPCAST: tl.constexpr, DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    """One key tile of the online softmax. MASKED: keys past a row's token or past kv_end
    are hidden (the causal diagonal, the segment's end); else every key is visible to every
    row, so the scale is applied after the row maximum and the mask is skipped. QK_FP8: q and
    K^T are FP8 and a row's scores are its dots times `row_scale` [M] (else `qk_scale`).
    PV_FP8: v is FP8 and P is rounded to e4m3 (`fp8_probabilities`) against integer maxima;
    its tiles start 16-aligned (`_prefill_kernel`), so a masked tile also hides the keys
    before the segment's first (`seg_start`)."""
    if KV_FP8:  # exact: every e4m3 value is a value of q's dtype
        if not QK_FP8 or k_t.shape[0] < 32:  # (FP8 tensor cores need K >= 32)
            k_t = k_t.to(Q_DTYPE)
        if not PV_FP8 or v.shape[0] < 32:
            v = v.to(Q_DTYPE)
    if UPCAST:
        k_t = k_t.to(tl.float32)
    s = tl.dot(q, k_t, input_precision=DOT_PRECISION)
    if QK_FP8:
        s = s * row_scale[:, None]
    if MASKED:
        visible = (n[None, :] < kv_end) & (n[None, :] <= tok[:, None])
        if PV_FP8:
            visible = visible & (n[None, :] >= seg_start)
        if QK_FP8:
            s = tl.where(visible, s, float("-inf"))
        else:
            s = tl.where(visible, s * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        if PV_FP8:
            m_new = fp8_probability_max(m_new)
        m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)  # padded M rows see no key
        p = tl.exp2(s - m_ref[:, None])
    elif QK_FP8:  # scores already scaled
        m_new = tl.maximum(m_i, tl.max(s, 1))
        if PV_FP8:
            m_new = fp8_probability_max(m_new)
        m_ref = m_new
        p = tl.exp2(s - m_ref[:, None])
    else:  # qk_scale > 0: the maximum of the scaled scores is the scaled maximum
        m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
        if PV_FP8:
            m_new = fp8_probability_max(m_new)
        m_ref = m_new
        p = tl.exp2(s * qk_scale - m_ref[:, None])
    alpha = tl.exp2(m_i - m_ref)
    l_i = l_i * alpha + tl.sum(p, 1)
    p_v = probabilities_for_values(p, v, PV_FP8, UPCAST)
    if UPCAST:
        p_v = p_v.to(tl.float32)
        v = v.to(tl.float32)
    acc = tl.dot(p_v, v, acc * alpha[:, None], input_precision=DOT_PRECISION)
    return acc, m_new, l_i


@triton.jit
def _attend_tiles(
    q, k_src, v_src, lo, hi, kv_head, tok, seg_start, kv_end, qk_scale, row_scale,
    stride_kt, stride_kh, stride_vt, stride_vh, acc, m_i, l_i,
    MASKED: tl.constexpr, KV_FP8: tl.constexpr, QK_FP8: tl.constexpr, PV_FP8: tl.constexpr,
    Q_DTYPE: tl.constexpr, UPCAST: tl.constexpr, DOT_PRECISION: tl.constexpr,
    D: tl.constexpr, BLOCK_N: tl.constexpr, TMA: tl.constexpr,
):  # fmt: skip
    """The key tiles lo, lo + BLOCK_N, ... before hi, each read (`_kv_tiles`) and attended
    (`_attend_tile`) in turn; PV_FP8 reads V transposed."""
    for n0 in range(lo, hi, BLOCK_N):
        n, k_t, v = _kv_tiles(k_src, v_src, n0, kv_head, kv_end, stride_kt, stride_kh,
                              stride_vt, stride_vh, D, BLOCK_N, TMA, PV_FP8)  # fmt: skip
        acc, m_i, l_i = _attend_tile(
            q, k_t, v, n, tok, seg_start, kv_end, qk_scale, row_scale, acc, m_i, l_i, MASKED,
            KV_FP8, QK_FP8, PV_FP8, Q_DTYPE, UPCAST, DOT_PRECISION,
        )  # fmt: skip
    return acc, m_i, l_i


@triton.jit
def _prefill_kernel(
    q_ptr,  # [N, HQ, D] last dim contiguous (QK_FP8: float8_e4m3fn)
    q_scale_ptr,  # [N, HQ] fp32 contiguous, the FP8 queries' scales (QK_FP8 only)
    k_src,  # [N, HKV, D] q's dtype, or float8_e4m3fn (KV_FP8: else FP8 values already widened;
    #         QK_FP8: float8_e4m3fn)
    v_src,  # [N, HKV, D]   with TMA, [N, HKV * D] tensor descriptors of them (PV_FP8: V
    #         transposed, [HKV, D, N'] float8_e4m3fn; with TMA a [HKV * D, N'] descriptor)
    k_scale_ptr,  # [HKV] fp32, the layer's K scales (KV_FP8 only)
    v_scale_ptr,  # [HKV] fp32, its V scales (KV_FP8 only)
    out_ptr,  # [N, HQ, D] contiguous, dtype of q
    work_seg_start_ptr,  # [B] int32, first token of the item's segment
    work_seg_end_ptr,  # [B] int32, one past its last token
    work_q_start_ptr,  # [B] int32, first query token of the item's block
    stride_qt,
    stride_qh,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    qk_scale,  # softmax scale * log2(e)
    HQ: tl.constexpr,
    GQA: tl.constexpr,
    GQA_P: tl.constexpr,
    D: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    BLOCK_N: tl.constexpr,
    UPCAST: tl.constexpr,  # dot in fp32 (interpreter: its bf16 dot is wrong)
    DOT_PRECISION: tl.constexpr,  # "ieee" for fp32 inputs (tf32 would lose ~3 digits)
    KV_FP8: tl.constexpr,  # K and V in FP8 with per-head scales
    QK_FP8: tl.constexpr,  # q and K FP8 (KV_FP8 only): Q K^T on FP8 tensor cores
    PV_FP8: tl.constexpr,  # P and V FP8 (KV_FP8 only): P V on FP8 tensor cores
    SPLIT_DIAGONAL: tl.constexpr,  # key tiles wholly before the block first, unmasked
    TMA: tl.constexpr,  # K and V through tensor descriptors (Hopper's bulk copies)
):
    item = tl.program_id(0)
    kv_head = tl.program_id(1)
    if KV_FP8:
        qk_scale = qk_scale * tl.load(k_scale_ptr + kv_head)
    seg_start = tl.load(work_seg_start_ptr + item)
    seg_end = tl.load(work_seg_end_ptr + item)
    q_start = tl.load(work_q_start_ptr + item)
    m_idx = tl.arange(0, BLOCK_Q * GQA_P)
    head_in_group = m_idx % GQA_P
    tok = q_start + m_idx // GQA_P
    head = kv_head * GQA + head_in_group
    m_ok = (tok < seg_end) & (head_in_group < GQA)
    d = tl.arange(0, D)
    q = tl.load(
        q_ptr + tok.to(tl.int64)[:, None] * stride_qt + head[:, None] * stride_qh + d[None, :],
        mask=m_ok[:, None],
        other=0.0,
    )
    row_scale = qk_scale  # unread without QK_FP8
    if QK_FP8:
        q_scale = tl.load(q_scale_ptr + tok.to(tl.int64) * HQ + head, mask=m_ok, other=1.0)
        row_scale = q_scale * qk_scale  # [M] fp32
        if D < 32 and not UPCAST:  # FP8 tensor cores need K >= 32: widen both (exactly)
            q = q.to(out_ptr.dtype.element_ty)
    if UPCAST:
        q = q.to(tl.float32)
    m_i = tl.full([BLOCK_Q * GQA_P], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_Q * GQA_P], tl.float32)
    acc = tl.zeros([BLOCK_Q * GQA_P, D], tl.float32)
    kv_end = tl.minimum(q_start + BLOCK_Q, seg_end)  # causal: nothing past the block's last token
    # The arguments every range of tiles shares: (its first key, its end, whether it is masked)
    # go before them
    common = (kv_head, tok, seg_start, kv_end, qk_scale, row_scale, stride_kt, stride_kh,
              stride_vt, stride_vh)  # fmt: skip
    masked_from = seg_start
    if PV_FP8:
        # V is read transposed, keys contiguous: tiles start on a 16-key boundary (16 bytes of
        # FP8: whole vector loads, a bulk copy's alignment), the first one masked where it
        # begins before the segment
        first = seg_start // 16 * 16
        masked_from = first
        if SPLIT_DIAGONAL:  # tiles whose keys all precede the block's first token: no mask
            masked_from = first + (q_start - first) // BLOCK_N * BLOCK_N
            unmasked_from = tl.minimum(first + BLOCK_N, masked_from)
            if first == seg_start:
                unmasked_from = first
            acc, m_i, l_i = _attend_tiles(
                q, k_src, v_src, first, unmasked_from, *common, acc, m_i, l_i, True, KV_FP8,
                QK_FP8, PV_FP8, out_ptr.dtype.element_ty, UPCAST, DOT_PRECISION, D, BLOCK_N, TMA,
            )  # fmt: skip
            acc, m_i, l_i = _attend_tiles(
                q, k_src, v_src, unmasked_from, masked_from, *common, acc, m_i, l_i, False,
                KV_FP8, QK_FP8, PV_FP8, out_ptr.dtype.element_ty, UPCAST, DOT_PRECISION, D,
                BLOCK_N, TMA,
            )  # fmt: skip
            masked_from = tl.maximum(masked_from, unmasked_from)
    elif SPLIT_DIAGONAL:  # tiles whose keys all precede the block's first token: no mask
        masked_from = seg_start + (q_start - seg_start) // BLOCK_N * BLOCK_N
        acc, m_i, l_i = _attend_tiles(
            q, k_src, v_src, seg_start, masked_from, *common, acc, m_i, l_i, False, KV_FP8,
            QK_FP8, PV_FP8, out_ptr.dtype.element_ty, UPCAST, DOT_PRECISION, D, BLOCK_N, TMA,
        )  # fmt: skip
    acc, m_i, l_i = _attend_tiles(
        q, k_src, v_src, masked_from, kv_end, *common, acc, m_i, l_i, True, KV_FP8, QK_FP8,
        PV_FP8, out_ptr.dtype.element_ty, UPCAST, DOT_PRECISION, D, BLOCK_N, TMA,
    )  # fmt: skip
    has = l_i > 0.0
    out = tl.where(has[:, None], acc / tl.where(has, l_i, 1.0)[:, None], 0.0)
    if KV_FP8:
        out = out * tl.load(v_scale_ptr + kv_head)
    if PV_FP8:
        out = out / FP8_P_SCALE
    tl.store(
        out_ptr + (tok.to(tl.int64) * HQ + head)[:, None] * D + d[None, :],
        out.to(out_ptr.dtype.element_ty),
        mask=m_ok[:, None],
    )


# The kernel's options where a caller names none, all on: key tiles wholly before a query block
# run without the causal mask, K and V through tensor descriptors where the device has them
# (compute capability 9+), and the work list longest items first (a query block late in a long
# prompt reads the most keys, so it must not start last). Together they are what made the
# default tile fastest at W2's and W4's prompt lengths (bench/prefill_tiles.py, numbers in
# docs/benchmarks.md); each alone gained less.
SPLIT_DIAGONAL = True
TMA_KV = True
HEAVY_FIRST = True


def prefill_block_q(q_heads: int, kv_heads: int) -> int:
    """Query tokens per program: M = BLOCK_Q × padded GQA = 64."""
    return max(64 // gqa_padded(q_heads, kv_heads), 1)


def prefill_work(
    cu_seqlens: tuple[int, ...],
    block_q: int,
    device: torch.device,
    heavy_first: bool | None = None,  # None: HEAVY_FIRST
) -> torch.Tensor:  # [3, B] int32: segment start, segment end, block's first query token
    items = [
        (start, end, q0)
        for start, end in itertools.pairwise(cu_seqlens)
        for q0 in range(start, end, block_q)
    ]
    if HEAVY_FIRST if heavy_first is None else heavy_first:
        items.sort(key=lambda item: item[0] - item[2])  # most keys before the block first
    host = torch.tensor(items, dtype=torch.int32).reshape(-1, 3).t().contiguous()
    if device.type == "cuda":  # pinned + queued: the host never waits for the device here
        return host.pin_memory().to(device, non_blocking=True)
    return host.to(device)


def ragged_causal_prefill(
    q: torch.Tensor,  # [N, Hq, D]
    k: torch.Tensor,  # [N, Hkv, D]
    v: torch.Tensor,  # [N, Hkv, D]
    cu_seqlens: tuple[int, ...],
    scale: float,
    kv_scales: KvScales | None = None,  # k, v: FP8 values (stored or widened) of these scales
    *,
    work: torch.Tensor | None = None,  # prefill_work(cu_seqlens, block_q, q.device), reusable
    out: torch.Tensor | None = None,  # [N, Hq, D] contiguous, dtype of q
    block_q: int | None = None,
    block_n: int = 64,
    widen_kv: bool = True,  # FP8 k, v widened to q's dtype before the kernel (False: in it)
    num_warps: int = 4,
    num_stages: int = 3,
    split_diagonal: bool | None = None,  # None: SPLIT_DIAGONAL
    tma: bool | None = None,  # None: TMA_KV where tma_usable; True: refused where it is not
    # Q K^T on FP8 tensor cores: the queries quantized per token and head (`quantize_rows`'
    # rule, `quantize_heads_triton`), K as FP8 values (an FP8 cache only)
    fp8_queries: bool = False,
    # P V on FP8 tensor cores: P rounded to e4m3 (`triton_common.fp8_probabilities`), V as
    # FP8 values (an FP8 cache only)
    fp8_probabilities: bool = False,
) -> torch.Tensor:  # [N, Hq, D] dtype of q
    tokens, q_heads, dim = q.shape
    kv_heads = k.shape[1]
    if dim & (dim - 1):
        raise ValueError(f"head_dim must be a power of two, got {dim}")
    gqa_p = gqa_padded(q_heads, kv_heads)
    block_q = block_q or prefill_block_q(q_heads, kv_heads)
    fp8 = kv_scales is not None
    for flag, on in (("fp8_queries", fp8_queries), ("fp8_probabilities", fp8_probabilities)):
        if on and not fp8:
            raise ValueError(f"{flag} needs FP8 keys and values (kv_scales)")
    # With scales: FP8 values as stored, or already widened to q's dtype (KVCache.write_rows).
    fp8_values = (KV_FP8_DTYPE, q.dtype)
    if not all(x.dtype in fp8_values if fp8 else x.dtype != KV_FP8_DTYPE for x in (k, v)):
        raise ValueError(
            f"q is {q.dtype}, kv_scales {'given' if kv_scales else 'none'}, but k, v are "
            f"{k.dtype}/{v.dtype}"
        )
    q, k, v = (x if x.stride(-1) == 1 else x.contiguous() for x in (q, k, v))
    if out is None:
        out = torch.empty((tokens, q_heads, dim), dtype=q.dtype, device=q.device)
    elif out.shape != q.shape or out.dtype != q.dtype or not out.is_contiguous():
        raise ValueError("out must be a contiguous tensor of q's shape and dtype")
    if len(cu_seqlens) < 2 or cu_seqlens[0] != 0 or cu_seqlens[-1] != tokens:
        out.zero_()  # tokens outside every segment: defined zeros
    if work is None:
        work = prefill_work(cu_seqlens, block_q, q.device)
    if work.shape[1] == 0:
        return out
    k_scale, v_scale = (kv_scales.k, kv_scales.v) if fp8 else (k, v)  # unread without FP8
    if fp8 and widen_kv:  # exact (a no-op for values already widened); the kernel's: a no-op
        v = v if fp8_probabilities else v.to(q.dtype)
        k = k if fp8_queries else k.to(q.dtype)
    if fp8_probabilities:
        v = v.to(KV_FP8_DTYPE)  # a no-op for stored values, exact for widened ones
    prompt_q, q_scale = q, q  # the scales are read with fp8_queries only
    if fp8_queries:
        k = k.to(KV_FP8_DTYPE)  # a no-op for stored keys, exact for widened ones
        prompt_q, q_scale = quantize_heads_triton(q)  # [N, Hq, D] e4m3, [N, Hq] fp32
    usable = tma_usable(q, k, v, values_transposed=fp8_probabilities)
    if tma and not usable:
        raise ValueError(
            "tma needs K (or FP8 keys) and V in q's dtype (or FP8 values, read transposed, with "
            "fp8_probabilities), heads contiguous, 16-byte aligned rows, and a device of "
            "compute capability 9+ (or the interpreter)"
        )
    use_tma = usable and (TMA_KV if tma is None else tma)
    if fp8_probabilities:  # P V's second operand with its reduction (the keys) contiguous
        v = keys_contiguous(v, block_n)  # [Hkv, D, N'] e4m3
        v_strides = (v.stride(1), v.stride(0))  # (a dimension's, a head's)
        v_src = _transposed_descriptor(v, block_n) if use_tma else v
    else:
        v_strides = (v.stride(0), v.stride(1))  # (a token's, a head's)
        v_src = _descriptor(v, block_n) if use_tma else v
    k_src = _descriptor(k, block_n) if use_tma else k
    split = SPLIT_DIAGONAL if split_diagonal is None else split_diagonal
    _prefill_kernel[(work.shape[1], kv_heads)](
        prompt_q, q_scale, k_src, v_src, k_scale, v_scale, out, work[0], work[1], work[2],
        prompt_q.stride(0), prompt_q.stride(1), k.stride(0), k.stride(1), *v_strides,
        scale * LOG2E, HQ=q_heads, GQA=q_heads // kv_heads, GQA_P=gqa_p, D=dim,
        BLOCK_Q=block_q, BLOCK_N=block_n, UPCAST=interpreting(_prefill_kernel),
        DOT_PRECISION=dot_precision(q.dtype), KV_FP8=fp8, QK_FP8=fp8_queries,
        PV_FP8=fp8_probabilities, SPLIT_DIAGONAL=split, TMA=use_tma,
        num_warps=num_warps, num_stages=num_stages,
    )  # fmt: skip
    return out


def tma_usable(
    q: torch.Tensor,  # [N, Hq, D]
    k: torch.Tensor,  # [N, Hkv, D]
    v: torch.Tensor,  # [N, Hkv, D]
    values_transposed: bool = False,  # V read transposed (FP8 probabilities: `keys_contiguous`)
) -> bool:
    """Whether K and V can be read through tensor descriptors: K as [N, Hkv * D] in q's dtype or
    FP8 (FP8 queries), each token's heads contiguous and rows 16-byte aligned, V the same in
    q's dtype (FP8 values widened) unless it is read transposed (a copy made to fit), and a
    device with bulk tensor copies (the interpreter emulates them)."""
    device = k.device
    if device.type == "cuda":
        if torch.cuda.get_device_capability(device)[0] < 9:
            return False
    elif not interpreting(_prefill_kernel):
        return False
    heads, dim = k.shape[1], k.shape[2]

    def laid_out(x: torch.Tensor) -> bool:
        return (
            x.shape[1:] == (heads, dim)
            and x.stride(2) == 1
            and x.stride(1) == dim
            and x.data_ptr() % 16 == 0
            and x.stride(0) * x.element_size() % 16 == 0
        )

    return (
        k.dtype in (q.dtype, KV_FP8_DTYPE)
        and laid_out(k)
        and (values_transposed or (v.dtype == q.dtype and laid_out(v)))
    )


def keys_contiguous(
    v: torch.Tensor,  # [N, Hkv, D]
    block_n: int,  # the kernel's key tile
) -> torch.Tensor:  # [Hkv, D, N'] N' = N + block_n rounded up to 16, zeros past N
    """V transposed so that each (head, dimension) row holds the keys in order: FP8 tensor
    cores take P V's second operand with its reduction dimension contiguous, and the kernel
    then reads each tile as it multiplies it (a copy of V, once, against a transposition of
    every tile in registers each time a query block reads it). A tile past N reads zeros, so
    the kernel loads tiles unmasked (16-byte rows: N' is a multiple of 16)."""
    tokens, heads, dim = v.shape
    padded = -(-(tokens + block_n) // 16) * 16
    out = torch.empty((heads, dim, padded), dtype=v.dtype, device=v.device)
    out[:, :, :tokens].copy_(v.permute(1, 2, 0))
    out[:, :, tokens:].zero_()  # read by descriptors past the batch's last key: never NaN
    return out


def _descriptor(x: torch.Tensor, block_n: int) -> TensorDescriptor:  # x [N, Hkv, D]
    tokens, heads, dim = x.shape
    return TensorDescriptor(
        x, shape=[tokens, heads * dim], strides=[x.stride(0), 1], block_shape=[block_n, dim]
    )


def _transposed_descriptor(v_t: torch.Tensor, block_n: int) -> TensorDescriptor:
    heads, dim, keys = v_t.shape  # `keys_contiguous`' [Hkv, D, N'], contiguous
    return TensorDescriptor(
        v_t, shape=[heads * dim, keys], strides=[keys, 1], block_shape=[dim, block_n]
    )
