"""Attention over an FP8 KV cache (`widebeam/kernels/kv/fp8_kv.py`).

The torch reference reads FP8 K and V as their dequantized values: it equals the same attention
over fp32 caches holding `stored × scale` (bit for bit: the same fp32 operations). Against the
unquantized K and V it stays within FP8_REL_ERROR: e4m3 keeps 3 mantissa bits, so each stored
value is off by up to 2^-4 of itself (2^-4 / √3 ≈ 3.6% RMS), and attention averages those
errors; the bound is about twice that RMS. The
Triton kernels (interpreter on the CPU, compiled on CUDA) match the reference within the
kernels' usual tolerance, and a key far beyond ±448 × its scale saturates: the output stays
finite.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from tests.kernels.attention.cases import DecodeCase, decode_case, tolerance
from widebeam.kernels.attention.packed import PackedDecode, pack_decode
from widebeam.kernels.attention.torch_ref import cascade_decode, causal_prefill
from widebeam.kernels.kv.fp8_kv import KvScales, dequantize_kv, quantize_kv

FP8_REL_ERROR = 0.06  # relative Frobenius error of FP8 KV attention against exact KV
GROUPS = [(3, 40, 2), (6, 70, 3), (1, 0, 2), (2, 17, 1)]  # (rows, prompt_len, suffix_len)


def _amax(x: torch.Tensor) -> torch.Tensor:  # [..., H, D] -> [H] fp32, NaN (poison) ignored
    return x.float().nan_to_num(0.0).abs().amax(dim=(0, 2))


def fp8_scales(k: torch.Tensor, v: torch.Tensor, headroom: float = 1.0) -> KvScales:
    """Per-head scales that fit each head's largest value (× headroom) at ±448."""
    return KvScales.of(_amax(k) * headroom / 448, _amax(v) * headroom / 448)


def quantized(case: DecodeCase, scales: KvScales) -> tuple[torch.Tensor, torch.Tensor]:
    """The case's caches in FP8 (poisoned slots stay NaN)."""
    return quantize_kv(case.k_cache, scales.k_inv), quantize_kv(case.v_cache, scales.v_inv)


def rel_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.float() - want.float()).norm() / want.float().norm())


def fp8_decode_inputs(
    dim: int, block_rows: int, device: torch.device, seed: int
) -> tuple[DecodeCase, KvScales, torch.Tensor, torch.Tensor, PackedDecode]:
    """GROUPS at fp32 (4 query heads, 2 KV heads, 4-slot pages, a padding row before each
    group), FP8 scales of its caches (room for twice their largest values), the caches
    quantized to them, and the batch packed in items of `block_rows` rows, prompts in 2 splits."""
    case = decode_case(
        GROUPS, q_heads=4, kv_heads=2, dim=dim, dtype=torch.float32, device=device,
        seed=seed, pad_rows=1, page_size=4,
    )  # fmt: skip
    scales = fp8_scales(case.k_cache, case.v_cache, headroom=2.0)
    k8, v8 = quantized(case, scales)
    packed = pack_decode(
        case.batch, case.q.shape[0], block_rows=block_rows, num_splits=2, page_size=4
    )
    return case, scales, k8, v8, packed


PREFILL_CU = (0, *itertools.accumulate((9, 1, 70)))  # a 70-token prompt reaches unmasked tiles


def fp8_prefill_inputs(
    dim: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, KvScales, torch.Tensor, torch.Tensor]:
    """q [N, 4, dim], k and v [N, 2, dim] over PREFILL_CU's segments, FP8 scales of k and v
    (room for twice their largest values), and k, v quantized to them."""
    gen = torch.Generator().manual_seed(5)

    def rand(heads: int) -> torch.Tensor:
        return torch.randn(PREFILL_CU[-1], heads, dim, generator=gen).to(device)

    q, k, v = rand(4) * 3, rand(2) * 2, rand(2)
    scales = fp8_scales(k, v, headroom=2.0)
    return q, k, v, scales, quantize_kv(k, scales.k_inv), quantize_kv(v, scales.v_inv)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_reference_reads_fp8_as_dequantized_values(dtype: torch.dtype) -> None:
    case = decode_case(
        GROUPS, q_heads=4, kv_heads=2, dim=32, dtype=dtype, device=torch.device("cpu"),
        seed=1, pad_rows=1,
    )  # fmt: skip
    scales = fp8_scales(case.k_cache, case.v_cache, headroom=1.5)
    k8, v8 = quantized(case, scales)
    real = case.real_rows
    got = cascade_decode(case.q, k8, v8, case.batch, 0.2, scales)
    k_deq, v_deq = dequantize_kv(k8, scales.k), dequantize_kv(v8, scales.v)
    want = cascade_decode(case.q, k_deq, v_deq, case.batch, 0.2)
    assert torch.equal(got[real], want[real])
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(38, h, 32, generator=gen).to(dtype) for h in (4, 2, 2))
    k8, v8 = quantize_kv(k, scales.k_inv), quantize_kv(v, scales.v_inv)
    cu = (0, 5, 5, 38)
    got = causal_prefill(q, k8, v8, cu, 0.2, scales)
    want = causal_prefill(q, dequantize_kv(k8, scales.k), dequantize_kv(v8, scales.v), cu, 0.2)
    assert torch.equal(got, want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fp8_is_within_its_tolerance_of_exact_kv(dtype: torch.dtype) -> None:
    case = decode_case(
        GROUPS, q_heads=4, kv_heads=2, dim=64, dtype=dtype, device=torch.device("cpu"),
        seed=2, pad_rows=1,
    )  # fmt: skip
    scales = fp8_scales(case.k_cache, case.v_cache)
    k8, v8 = quantized(case, scales)
    real = case.real_rows
    exact = cascade_decode(case.q, case.k_cache, case.v_cache, case.batch, 64**-0.5)
    got = cascade_decode(case.q, k8, v8, case.batch, 64**-0.5, scales)
    assert 0 < rel_error(got[real], exact[real]) <= FP8_REL_ERROR
    # The scale barely matters while values stay within e4m3's range: 1/16 of it does as well.
    small = fp8_scales(case.k_cache, case.v_cache, headroom=16.0)
    k8, v8 = quantized(case, small)
    got = cascade_decode(case.q, k8, v8, case.batch, 64**-0.5, small)
    assert rel_error(got[real], exact[real]) <= FP8_REL_ERROR


def _saturating_case(device: torch.device) -> tuple[DecodeCase, KvScales]:
    case = decode_case(
        [(4, 20, 2)], q_heads=4, kv_heads=2, dim=32, dtype=torch.bfloat16, device=device,
        seed=5,
    )  # fmt: skip
    scales = fp8_scales(case.k_cache, case.v_cache)
    group = case.batch.groups[0]
    for slot in (group.prompt_slots[3], group.suffix_slots[1, 0]):
        case.k_cache[slot] = 1e30  # ~1e32 times 448 x its head's scale
        case.v_cache[slot] = -1e30
    return case, scales


def test_keys_far_beyond_range_saturate_to_a_finite_output() -> None:
    case, scales = _saturating_case(torch.device("cpu"))
    k8, v8 = quantized(case, scales)
    assert k8.float().nan_to_num(0.0).abs().max() == 448.0
    out = cascade_decode(case.q, k8, v8, case.batch, 0.2, scales)
    assert out.isfinite().all()


def test_triton_cascade_reads_fp8_as_the_reference(kernel_device: torch.device) -> None:
    from widebeam.kernels.attention.triton_cascade import cascade_decode_packed

    for seed, (q_heads, dtype, splits, page) in enumerate(
        [(4, torch.bfloat16, 2, 4), (6, torch.float32, 1, 1)]
    ):
        case = decode_case(
            GROUPS, q_heads=q_heads, kv_heads=2, dim=32, dtype=dtype, device=kernel_device,
            seed=10 + seed, pad_rows=1, page_size=page,
        )  # fmt: skip
        scales = fp8_scales(case.k_cache, case.v_cache, headroom=2.0)
        k8, v8 = quantized(case, scales)
        rows = case.q.shape[0]
        block_rows = 16 // (4 if q_heads == 6 else 2)
        packed = pack_decode(
            case.batch, rows, block_rows=block_rows, num_splits=splits, page_size=page
        )
        out = torch.full_like(case.q, float("nan"))
        cascade_decode_packed(case.q, k8, v8, packed, 0.17, scales, out=out)
        expected = cascade_decode(case.q, k8, v8, case.batch, 0.17, scales)
        real = case.real_rows
        torch.testing.assert_close(out[real].float(), expected[real].float(), **tolerance(dtype))
        assert (out[~real] == 0).all()
        with pytest.raises(ValueError, match="kv_scales none"):
            cascade_decode_packed(case.q, k8, v8, packed, 0.17)


def test_triton_prefill_reads_fp8_as_the_reference(kernel_device: torch.device) -> None:
    from widebeam.kernels.attention.triton_prefill import ragged_causal_prefill

    cu = (0, *itertools.accumulate((9, 1, 70)))
    gen = torch.Generator().manual_seed(4)

    def rand(heads: int) -> torch.Tensor:
        return torch.randn(cu[-1], heads, 32, generator=gen).to(torch.bfloat16).to(kernel_device)

    q, k, v = rand(4), rand(2) * 30, rand(2) / 30
    scales = fp8_scales(k, v, headroom=0.5)  # the largest values saturate
    k8, v8 = quantize_kv(k, scales.k_inv), quantize_kv(v, scales.v_inv)
    out = torch.full_like(q, float("nan"))
    ragged_causal_prefill(q, k8, v8, cu, 0.21, scales, out=out)
    expected = causal_prefill(q, k8, v8, cu, 0.21, scales)
    assert expected.isfinite().all()
    torch.testing.assert_close(out.float(), expected.float(), **tolerance(torch.bfloat16))
    # FP8 K/V widened before the kernel (the default) or in its loop: the same bits
    in_loop = ragged_causal_prefill(q, k8, v8, cu, 0.21, scales, widen_kv=False)
    assert torch.equal(in_loop, out)
    # ... or handed over already widened to q's dtype (as KVCache.write_rows does)
    widened = ragged_causal_prefill(q, k8.to(q.dtype), v8.to(q.dtype), cu, 0.21, scales)
    assert torch.equal(widened, out)
    with pytest.raises(ValueError, match=r"but k, v are torch\.float32/torch\.float32"):
        ragged_causal_prefill(q, k8.float(), v8.float(), cu, 0.21, scales)  # not q's dtype
    with pytest.raises(ValueError, match="kv_scales none, but k, v are"):
        ragged_causal_prefill(q, k8, v8, cu, 0.21)  # FP8 needs its scales


@pytest.mark.parametrize(("dim", "tma"), [(16, False), (32, False), (32, True)])
def test_triton_prefill_fp8_queries_match_the_reference_of_rounded_queries(
    kernel_device: torch.device, dim: int, tma: bool
) -> None:
    """`fp8_queries` in the prefill: Q K^T over queries quantized per token and head and K as
    FP8 values, handed over stored or widened (as `KVCache.write_rows` widens them). fp32 queries
    keep every other step exact, so the kernel lands on the reference of the rounded queries,
    measurably off the exact one, through the masked diagonal tiles and the unmasked ones before
    it (a 70-token prompt at 32-token query blocks), with K read by pointer or by tensor
    descriptor. Heads narrower than FP8 tensor cores take (16 < 32) widen both operands."""
    from widebeam.kernels.attention.triton_prefill import ragged_causal_prefill, tma_usable

    cu = PREFILL_CU
    q, k, v, scales, k8, v8 = fp8_prefill_inputs(dim, kernel_device)
    if tma and not tma_usable(q, k8, v8.to(q.dtype)):
        pytest.skip("no tensor descriptors here (a GPU before compute capability 9)")
    out = torch.full_like(q, float("nan"))
    ragged_causal_prefill(
        q, k8, v8, cu, 0.21, scales, out=out, block_q=16, block_n=16, fp8_queries=True, tma=tma
    )  # fmt: skip
    rounded = causal_prefill(q, k8, v8, cu, 0.21, scales, fp8_queries=True)
    exact = causal_prefill(q, k8, v8, cu, 0.21, scales)
    to_rounded, to_exact = rel_error(out, rounded), rel_error(out, exact)
    assert to_rounded < 1e-5 and to_exact > 100 * to_rounded, (to_rounded, to_exact)
    widened = ragged_causal_prefill(
        q, k8.to(q.dtype), v8.to(q.dtype), cu, 0.21, scales, block_q=16, block_n=16,
        fp8_queries=True, tma=tma,
    )  # fmt: skip
    assert torch.equal(widened, out)
    with pytest.raises(ValueError, match="fp8_queries needs FP8 keys and values"):
        ragged_causal_prefill(q, k, v, cu, 0.21, fp8_queries=True)


def test_triton_backend_saturated_keys_stay_finite(kernel_device: torch.device) -> None:
    from widebeam.kernels.attention.factory import make_attention_backend

    case, scales = _saturating_case(kernel_device)
    k8, v8 = quantized(case, scales)
    backend = make_attention_backend("triton", page_size=1)
    out = backend.decode(case.q, k8, v8, case.batch, 0.2, scales)
    expected = cascade_decode(case.q, k8, v8, case.batch, 0.2, scales)
    assert out.isfinite().all()
    torch.testing.assert_close(out.float(), expected.float(), **tolerance(torch.bfloat16))


def test_fp8_dots_are_fp16_where_tiles_are_widened_often() -> None:
    import triton.language as tl

    from widebeam.kernels.attention.triton_common import FP16_DOTS_FROM_WIDENINGS, fp8_kv_dot

    often, rarely = FP16_DOTS_FROM_WIDENINGS, FP16_DOTS_FROM_WIDENINGS - 1
    assert fp8_kv_dot(torch.bfloat16, often) == tl.float16 == fp8_kv_dot(torch.float16, often)
    assert fp8_kv_dot(torch.bfloat16, rarely) == tl.bfloat16
    assert fp8_kv_dot(torch.float32, often) == tl.float32
    assert fp8_kv_dot(torch.float32, often, torch.bfloat16) == tl.bfloat16
    assert fp8_kv_dot(torch.bfloat16, often, torch.bfloat16) == tl.bfloat16
    with pytest.raises(ValueError, match=r"no FP8 KV dot in torch\.int8"):
        fp8_kv_dot(torch.bfloat16, 1, torch.int8)


def test_triton_cascade_fp8_queries_beyond_fp16_range_are_clamped(
    kernel_device: torch.device,
) -> None:
    """A bf16 query component beyond fp16's range (65504) is clamped for the prefix kernel's
    fp16 dots: rows with only a prompt get the reference's attention of the clamped query (an
    fp16 infinity would make the prompt's partial NaN, which the merge drops as empty)."""
    from widebeam.kernels.attention.triton_cascade import cascade_decode_packed

    case = decode_case(
        [(3, 40, 0), (2, 17, 0)], q_heads=4, kv_heads=2, dim=32, dtype=torch.bfloat16,
        device=kernel_device, seed=21, pad_rows=1, page_size=4,
    )  # fmt: skip
    q = case.q.clone()
    q[:, :, 0] = 3.0e5  # fp16's largest finite value is 65504
    scales = fp8_scales(case.k_cache, case.v_cache, headroom=2.0)
    k8, v8 = quantized(case, scales)
    packed = pack_decode(case.batch, q.shape[0], block_rows=8, num_splits=2, page_size=4)
    out = cascade_decode_packed(q, k8, v8, packed, 0.2, scales, fp8_dot=torch.float16)
    clamped = q.float().clamp(-65504.0, 65504.0)
    expected = cascade_decode(clamped, k8, v8, case.batch, 0.2, scales)
    real = case.real_rows
    torch.testing.assert_close(
        out[real].float(), expected[real].float(), **tolerance(torch.bfloat16)
    )


@pytest.mark.parametrize(("dim", "block_rows"), [(16, 8), (32, 8), (32, 64)])
def test_triton_cascade_fp8_queries_match_the_reference_of_rounded_queries(
    kernel_device: torch.device, dim: int, block_rows: int
) -> None:
    """`fp8_queries`: the prefix kernel's Q K^T over FP8 queries (each row and head rounded by
    `quantize_rows`' rule) and K as stored. fp32 queries keep every other step exact, so the
    kernel lands on the reference of the rounded queries, and measurably off the exact one.
    Heads narrower than FP8 tensor cores take (16 < 32) widen both operands; items of
    PREFIX_WIDE_M queries (64 rows at GQA 2, the engine's choice for wide batches) hold
    requests smaller than one item."""
    from widebeam.kernels.attention.torch_ref import fp8_rounded_queries
    from widebeam.kernels.attention.triton_cascade import cascade_decode_packed
    from widebeam.kernels.fp8.quantize import quantize_rows

    case, scales, k8, v8, packed = fp8_decode_inputs(dim, block_rows, kernel_device, seed=31)
    out = torch.full_like(case.q, float("nan"))
    cascade_decode_packed(case.q, k8, v8, packed, 0.17, scales, out=out, fp8_queries=True)
    rounded = cascade_decode(case.q, k8, v8, case.batch, 0.17, scales, fp8_queries=True)
    exact = cascade_decode(case.q, k8, v8, case.batch, 0.17, scales)
    real = case.real_rows
    to_rounded, to_exact = (rel_error(out[real], x[real]) for x in (rounded, exact))
    assert to_rounded < 1e-5 and to_exact > 100 * to_rounded, (to_rounded, to_exact)
    assert (out[~real] == 0).all()
    # the reference's rounded queries are quantize_rows' values, row by row and head by head
    q = case.q[:3]
    by_rows = quantize_rows(q.reshape(-1, q.shape[-1]), cols=q.shape[-1])
    expected = (by_rows.data.float() * by_rows.scale).reshape(q.shape)
    assert torch.equal(fp8_rounded_queries(q), expected)
    with pytest.raises(ValueError, match="fp8_queries needs an FP8 cache"):
        cascade_decode_packed(case.q, case.k_cache, case.v_cache, packed, 0.17, fp8_queries=True)


def test_fp8_queries_reach_the_backends_that_have_them() -> None:
    from widebeam.kernels.attention.factory import make_attention_backend

    assert make_attention_backend("torch", fp8_queries=True).fp8_queries is True  # type: ignore[attr-defined]
    assert make_attention_backend("torch").fp8_queries is False  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="fp8_queries needs the torch or triton attention backend"):
        make_attention_backend("flashinfer", fp8_queries=True)
