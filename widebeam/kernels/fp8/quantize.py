"""Per-row FP8 (e4m3) quantization: `scale = amax * fp32(1 / 448)`, `q = x / scale` rounded to
FP8.

Weights quantize per output channel (a row of `[out, in]`), activations per token (a row of
`[tokens, in]`). Both are padded to multiples of `FP8_ALIGN` in the dimensions `torch._scaled_mm`
requires (`in` for both, `out` for weights): the padding is zeros, so it adds nothing to a dot
product. Only tensor ops, no read to the host: CUDA graphs capture it.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0  # torch.finfo(torch.float8_e4m3fn).max
# 1 / 448 rounded to fp32 (exactly representable as a Python float). A row's scale is its
# amax times this, not amax / 448: torch's CUDA `tensor / python_scalar` multiplies by the
# scalar's fp32 reciprocal while its CPU kernel divides, so `/ FP8_MAX` gave scales that differ
# in the last bit between devices; an explicit product is the same IEEE fp32 multiply on the
# CPU, on CUDA and in the Triton kernels (`triton_quantize.py`), which pass this value as fp32.
INV_FP8_MAX = float(torch.tensor(1.0, dtype=torch.float32) / torch.tensor(FP8_MAX))
# torch._scaled_mm needs the shared (in) dimension and the weight's out dimension divisible by 16.
FP8_ALIGN = 16
# An all-zero row gets this scale instead of 0 (its quantized values are zeros either way).
MIN_SCALE = 1e-12


def padded(size: int) -> int:
    """`size` rounded up to a multiple of FP8_ALIGN."""
    return -(-size // FP8_ALIGN) * FP8_ALIGN


class Fp8Rows(NamedTuple):
    """A matrix quantized row by row."""

    data: torch.Tensor  # [rows, padded cols] float8_e4m3fn
    scale: torch.Tensor  # [rows, 1] fp32: row r is data[r] * scale[r]


def quantize_rows(x: torch.Tensor, cols: int | None = None) -> Fp8Rows:
    """x [rows, k] (any float dtype) -> FP8 rows with one fp32 scale each; `cols` (>= k): the
    width to zero-pad the FP8 data to (default: k rounded up to FP8_ALIGN).

    Every step is one IEEE-rounded fp32 operation, the same on every device: the scale a
    product (`INV_FP8_MAX`), `x / scale` a tensor-by-tensor division (torch divides those
    exactly on CUDA too), the e4m3 cast round-to-nearest-even."""
    width = padded(x.shape[1]) if cols is None else cols
    xf = x.float()
    amax = xf.abs().amax(dim=1, keepdim=True)  # [rows, 1] fp32
    scale = amax.clamp(min=MIN_SCALE) * INV_FP8_MAX
    q = (xf / scale).clamp(-FP8_MAX, FP8_MAX)
    if width != x.shape[1]:
        q = F.pad(q, (0, width - x.shape[1]))
    return Fp8Rows(q.to(FP8_DTYPE), scale)


def dequantize_rows(rows: Fp8Rows) -> torch.Tensor:  # [rows, padded cols] fp32
    return rows.data.float() * rows.scale


class Fp8Weight(NamedTuple):
    """A linear layer's weight as the FP8 GEMMs take it."""

    data: torch.Tensor  # [padded out, padded in] float8_e4m3fn, zero padding
    scale: torch.Tensor  # [1, padded out] fp32 per output channel (padding rows: 1)
    out_features: int
    in_features: int


def quantize_weight(weight: torch.Tensor) -> Fp8Weight:
    """weight [out, in] (any float dtype) -> per-output-channel FP8."""
    rows = quantize_rows(weight)
    return weight_from_rows(rows.data, rows.scale[:, 0], weight.shape[1])


def weight_from_rows(
    data: torch.Tensor,  # [out, >= in] float8_e4m3fn
    scale: torch.Tensor,  # [out] fp32 (or any float: cast)
    in_features: int,
) -> Fp8Weight:
    """Pad already-quantized per-channel rows (a checkpoint's) to the GEMMs' layout."""
    out_features = data.shape[0]
    if scale.shape != (out_features,):
        raise ValueError(f"expected {out_features} per-channel scales, got {tuple(scale.shape)}")
    rows, cols = padded(out_features), padded(in_features)
    full = torch.zeros(rows, cols, dtype=FP8_DTYPE, device=data.device)
    full[:out_features, :in_features] = data[:, :in_features]
    full_scale = torch.ones(1, rows, dtype=torch.float32, device=data.device)
    full_scale[0, :out_features] = scale.float()
    return Fp8Weight(full, full_scale, out_features, in_features)


def concat_weights(parts: list[Fp8Weight]) -> Fp8Weight:
    """One weight whose output channels are `parts`' one after the other (a fused q/k/v or
    gate/up GEMM): per-channel scales make this exact."""
    in_features = parts[0].in_features
    if any(p.in_features != in_features for p in parts):
        raise ValueError("fused FP8 weights must share their input width")
    data = torch.cat([p.data[: p.out_features] for p in parts])
    scale = torch.cat([p.scale[0, : p.out_features] for p in parts])
    return weight_from_rows(data, scale, in_features)
