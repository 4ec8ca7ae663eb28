"""Per-token FP8 quantization of activations in one Triton pass: each row read once, its amax,
scale and FP8 values written once (torch's reference takes a chain of elementwise kernels, each
a full read and write of an fp32 copy: at thousands of decode rows, per GEMM, that traffic is of
the GEMM's own order). The arithmetic is `quantize.quantize_rows`': fp32, `scale = max(amax,
1e-12) * fp32(1 / 448)`, `x / scale` (IEEE) clamped to ±448, rounded to e4m3; zero padding up
to `cols`. Every step is an IEEE-rounded fp32 operation, so the scales and FP8 values equal the
torch reference's bit for bit, compiled or interpreted.

`_store_fp8_row` is that arithmetic for one row already in registers: the layer kernels that
produce a GEMM's input (`kernels/layers/triton_fp8_layers.py`) end with it instead of storing
the row in the model dtype for this pass to read back."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from widebeam.kernels.fp8.quantize import (
    FP8_DTYPE,
    FP8_MAX,
    INV_FP8_MAX,
    MIN_SCALE,
    Fp8Rows,
    padded,
)


@triton.jit
def _quantize_rows_kernel(
    x_ptr, q_ptr, scale_ptr, width, stride_x, stride_q, min_scale, fp8_max, inv_fp8_max,
    BLOCK: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride_x + cols, mask=cols < width, other=0.0).to(tl.float32)
    _store_fp8_row(
        x, cols, q_ptr + row * stride_q, scale_ptr + row, stride_q, min_scale, fp8_max,
        inv_fp8_max,
    )  # fmt: skip


@triton.jit
def _store_fp8_row(x, cols, q_row_ptr, scale_row_ptr, q_width, min_scale, fp8_max, inv_fp8_max):
    """x: one row, fp32 [BLOCK], lanes past the row's width 0 -> its scale at `scale_row_ptr`
    and its FP8 values at `q_row_ptr` [q_width] (the zero lanes become the zero padding).

    The scale is a product with `inv_fp8_max` (fp32(1 / 448), `quantize.INV_FP8_MAX`), as the
    reference's; `x / scale` is IEEE-rounded (`div_rn`), as torch's tensor division is on every
    device: compiled Triton lowers `/` on fp32 to the approximate `div.full.f32` (up to 2 ulp
    off), which would, rarely, round an FP8 value away from the reference's."""
    scale = tl.maximum(tl.max(tl.abs(x), axis=0), min_scale) * inv_fp8_max
    tl.store(scale_row_ptr, scale)
    q = _round_to_e4m3(tl.minimum(tl.maximum(tl.math.div_rn(x, scale), -fp8_max), fp8_max))
    tl.store(q_row_ptr + cols, q.to(tl.float8e4nv), mask=cols < q_width)


@triton.jit
def _round_to_e4m3(v):
    """fp32 `v` (|v| <= 448) rounded to the nearest e4m3 value, ties to even, still in fp32: the
    cast to FP8 that follows is then exact everywhere. (Triton's interpreter, the CPU tests'
    path, rounds that cast differently from the GPU's round-to-nearest-even.)"""
    exponent = ((v.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127
    exponent = tl.maximum(exponent, -6)  # e4m3's smallest normal exponent; below: subnormals
    step = ((exponent - 3 + 127) << 23).to(tl.float32, bitcast=True)  # 3 mantissa bits
    inv_step = ((3 - exponent + 127) << 23).to(tl.float32, bitcast=True)  # 1 / step, exact
    # |v / step| < 16, an exact product: adding and removing 1.5 * 2^23 rounds it to an
    # integer, ties to even
    whole = (v * inv_step + 12582912.0) - 12582912.0
    return whole * step


def quantize_rows_triton(x: torch.Tensor, cols: int | None = None) -> Fp8Rows:
    """x [rows, k] (unit stride along k) -> FP8 rows zero-padded to `cols` (default: k rounded
    up to FP8_ALIGN), with their scales [rows, 1] fp32."""
    width = padded(x.shape[1]) if cols is None else cols
    if x.stride(1) != 1:
        x = x.contiguous()
    q = torch.empty(x.shape[0], width, dtype=FP8_DTYPE, device=x.device)
    scale = torch.empty(x.shape[0], 1, dtype=torch.float32, device=x.device)
    if x.shape[0]:
        block = triton.next_power_of_2(width)
        _quantize_rows_kernel[(x.shape[0],)](
            x, q, scale, x.shape[1], x.stride(0), q.stride(0), MIN_SCALE, FP8_MAX, INV_FP8_MAX,
            BLOCK=block, num_warps=max(1, min(8, block // 256)),
        )  # fmt: skip
    return Fp8Rows(q, scale)
