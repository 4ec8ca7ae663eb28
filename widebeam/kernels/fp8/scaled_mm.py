"""The FP8 linear through `torch._scaled_mm` with row-wise scales (SM 8.9+ on CUDA).

Its documented constraints: the first operand row-major, the second column-major (the weight
`[out, in]` transposed is), the shared dimension and the second operand's columns divisible by
16 (`Fp8Weight` is padded to that at load, activations at quantization), `scale_a` [M, 1] and
`scale_b` [1, N] fp32, and, for row-wise scaling on CUDA, a bf16 output. The bias is added
after, in the model dtype. Activations are quantized by the one-pass Triton kernel where Triton
is importable (`triton_quantize.py`, the same values), by the torch reference otherwise."""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from widebeam.kernels.fp8.quantize import Fp8Rows, Fp8Weight, quantize_rows

Quantizer = Callable[[torch.Tensor, int | None], Fp8Rows]


@functools.cache
def _triton_quantizer() -> Quantizer | None:
    try:
        from widebeam.kernels.fp8.triton_quantize import quantize_rows_triton
    except ImportError:
        return None
    return quantize_rows_triton


def quantize_activations(x: torch.Tensor, cols: int) -> Fp8Rows:
    """x [tokens, in] -> FP8 rows zero-padded to `cols`."""
    fused = _triton_quantizer() if x.is_cuda else None
    return quantize_rows(x, cols) if fused is None else fused(x, cols)


def scaled_mm_rows(
    rows: Fp8Rows,  # activations already quantized: [tokens, padded in]
    weight: Fp8Weight,
    bias: torch.Tensor | None,  # [out] bf16
    out_dtype: torch.dtype,  # bf16
    fast_accum: bool = False,
) -> torch.Tensor:  # [tokens, out] out_dtype
    """`fast_accum`: let Hopper's tensor cores keep FP8 partial sums in their reduced internal
    precision over the whole K loop instead of promoting them to fp32 as it goes (faster; the
    engine's `fp8_accumulation`, `backend.SCALED_MM_FAST`)."""
    out = torch._scaled_mm(
        rows.data,
        weight.data.t(),
        scale_a=rows.scale,
        scale_b=weight.scale,
        out_dtype=out_dtype,
        use_fast_accum=fast_accum,
    )  # [tokens, padded out]
    if weight.data.shape[0] != weight.out_features:
        out = out[:, : weight.out_features].contiguous()
    return out if bias is None else out + bias


def fp8_linear_scaled_mm(
    x: torch.Tensor,  # [tokens, in] bf16
    weight: Fp8Weight,
    bias: torch.Tensor | None,  # [out] bf16
) -> torch.Tensor:  # [tokens, out] bf16
    return scaled_mm_rows(quantize_activations(x, weight.data.shape[1]), weight, bias, x.dtype)
