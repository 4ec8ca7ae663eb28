"""The Triton KV write: one program per row copies its K and V heads to the row's slot, for an
FP8 cache quantized on the way (`fp8_kv.py`'s arithmetic: times the head's reciprocal scale,
clamped to ±448, rounded to nearest even), and optionally to a dense copy of the rows (in the
cache's dtype, or an FP8 cache's values widened: `kv_write.check_rows_out`)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from widebeam.kernels.fp8.quantize import FP8_MAX
from widebeam.kernels.fp8.triton_quantize import round_to_e4m3
from widebeam.kernels.kv.fp8_kv import KvScales
from widebeam.kernels.kv.kv_write import check_rows_out, check_scales


@triton.jit
def _stored(x, inv_scale_ptr, h, inside, fp8_max, QUANTIZE: tl.constexpr, DTYPE: tl.constexpr):
    """Rows [BLOCK_H, D] as the cache's dtype holds them."""
    if QUANTIZE:
        inv = tl.load(inv_scale_ptr + h, mask=inside, other=1.0)  # [BLOCK_H, 1] fp32
        scaled = tl.minimum(tl.maximum(x.to(tl.float32) * inv, -fp8_max), fp8_max)
        # Rounded in fp32 first (the interpreter's own fp32 -> e4m3 cast rounds otherwise), the
        # sign put back on values that round to zero, as torch's cast keeps it.
        sign = scaled.to(tl.int32, bitcast=True) & -2147483648
        rounded = round_to_e4m3(scaled).to(tl.int32, bitcast=True) | sign
        x = rounded.to(tl.float32, bitcast=True)
    return x.to(DTYPE)


@triton.jit
def _kv_write_kernel(
    k_ptr, v_ptr, slots_ptr, k_cache_ptr, v_cache_ptr,
    k_inv_ptr, v_inv_ptr,  # [HEADS] fp32 reciprocal scales (QUANTIZE only)
    k_rows_ptr, v_rows_ptr,  # [N, HEADS, D] contiguous, the cache's dtype or wider (KEEP_ROWS)
    stride_kn, stride_kh, stride_vn, stride_vh, fp8_max,
    HEADS: tl.constexpr, BLOCK_H: tl.constexpr, D: tl.constexpr,
    QUANTIZE: tl.constexpr, KEEP_ROWS: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    slot = tl.load(slots_ptr + row).to(tl.int64)
    h = tl.arange(0, BLOCK_H)[:, None]
    d = tl.arange(0, D)[None, :]
    inside = h < HEADS
    dtype = k_cache_ptr.dtype.element_ty
    k = tl.load(k_ptr + row * stride_kn + h * stride_kh + d, mask=inside)
    v = tl.load(v_ptr + row * stride_vn + h * stride_vh + d, mask=inside)
    k = _stored(k, k_inv_ptr, h, inside, fp8_max, QUANTIZE, dtype)
    v = _stored(v, v_inv_ptr, h, inside, fp8_max, QUANTIZE, dtype)
    dst = slot * (HEADS * D) + h * D + d
    tl.store(k_cache_ptr + dst, k, mask=inside)
    tl.store(v_cache_ptr + dst, v, mask=inside)
    if KEEP_ROWS:
        here = row * (HEADS * D) + h * D + d
        rows_dtype = k_rows_ptr.dtype.element_ty
        tl.store(k_rows_ptr + here, k.to(rows_dtype), mask=inside)
        tl.store(v_rows_ptr + here, v.to(rows_dtype), mask=inside)


def supports(
    k_cache: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    rows_out: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> bool:
    """A contiguous cache (and row copies), unit-stride head rows, a power-of-two head size."""
    dim = k_cache.shape[-1]
    return (
        k_cache.is_contiguous()
        and k.stride(-1) == 1
        and v.stride(-1) == 1
        and dim == triton.next_power_of_2(dim)
        and (rows_out is None or all(r.is_contiguous() for r in rows_out))
    )


def write_kv_triton(
    k_cache: torch.Tensor,  # [slots, kv_heads, head_dim] contiguous
    v_cache: torch.Tensor,  # [slots, kv_heads, head_dim] contiguous
    slots: torch.Tensor,  # [N] int64
    k: torch.Tensor,  # [N, kv_heads, head_dim] unit stride along head_dim
    v: torch.Tensor,  # [N, kv_heads, head_dim] unit stride along head_dim
    scales: KvScales | None = None,  # the layer's, for an FP8 cache
    rows_out: tuple[torch.Tensor, torch.Tensor] | None = None,  # [N, kv_heads, head_dim] x2
) -> None:
    rows, heads, dim = k.shape
    if v.shape != k.shape or k_cache.shape[1:] != k.shape[1:] or v_cache.shape != k_cache.shape:
        raise ValueError(
            f"k {tuple(k.shape)}, v {tuple(v.shape)} and caches {tuple(k_cache.shape)} / "
            f"{tuple(v_cache.shape)} disagree"
        )
    check_scales(k_cache, scales)
    check_rows_out(k_cache, k, rows_out)
    if rows == 0:
        return
    k_inv, v_inv = (k_cache, v_cache) if scales is None else (scales.k_inv, scales.v_inv)
    k_rows, v_rows = (k_cache, v_cache) if rows_out is None else rows_out
    _kv_write_kernel[(rows,)](
        k, v, slots, k_cache, v_cache, k_inv, v_inv, k_rows, v_rows,
        k.stride(0), k.stride(1), v.stride(0), v.stride(1), FP8_MAX,
        HEADS=heads, BLOCK_H=triton.next_power_of_2(heads), D=dim,
        QUANTIZE=scales is not None, KEEP_ROWS=rows_out is not None,
    )  # fmt: skip
