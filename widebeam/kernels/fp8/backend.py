"""Which FP8 GEMM a device runs, decided here once: `torch._scaled_mm` on CUDA, the plain-torch
reference elsewhere. The model's FP8 linears hold the chosen object; nothing else names a path.

On CUDA the GEMM sums its products either precisely (`SCALED_MM`: Hopper promotes the FP8
partial sums to fp32 every 128 products) or fast (`SCALED_MM_FAST`, `use_fast_accum=True`: the
tensor cores' reduced internal precision over the whole K loop; bench/fp8_gemm.py on an H200:
1.9e-3 relative error against the exact sum of the same FP8 products, 6.9e-4 precise, next to
FP8's own 3.75% against bf16; decoder layers 1.46x bf16 against 1.31x). The engine's
`fp8_accumulation` chooses; the CPU reference sums in fp32 either way.

A path is its activation quantizer and its GEMM on already-quantized rows: the model hands an
FP8 linear rows its previous kernel quantized (`widebeam/kernels/layers/dispatch.py`'s `*_fp8`
layers) and the linear skips its own quantization.

A third GEMM, `triton_gemm.py`, serves the weight shapes listed in `TRITON_FROM_ROWS` from the
row count given there (`gemm_for_weight`, applied per linear at load); `torch._scaled_mm` serves
the rest. The list is empty until `bench/fp8_gemm.py` shows on the serving GPU where it wins."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch

from widebeam.kernels.fp8.quantize import Fp8Rows, Fp8Weight, quantize_rows
from widebeam.kernels.fp8.scaled_mm import quantize_activations, scaled_mm_rows
from widebeam.kernels.fp8.torch_ref import fp8_matmul_ref

# torch._scaled_mm's row-wise FP8 GEMM needs Ada (8.9) or Hopper and later.
MIN_CUDA_CAPABILITY = (8, 9)

# (x [tokens, in] model dtype, padded in) -> FP8 rows
QuantizeFn = Callable[[torch.Tensor, int], Fp8Rows]
# (rows, weight, bias [out] | None, model dtype) -> [tokens, out] model dtype
MatmulFn = Callable[[Fp8Rows, Fp8Weight, torch.Tensor | None, torch.dtype], torch.Tensor]


@dataclass(frozen=True)
class Fp8Gemm:
    """One FP8 GEMM path: its activation quantizer and its GEMM on quantized rows."""

    name: str
    quantize: QuantizeFn
    matmul: MatmulFn

    def linear(
        self,
        x: torch.Tensor,  # [tokens, in] model dtype
        weight: Fp8Weight,
        bias: torch.Tensor | None,  # [out] model dtype
    ) -> torch.Tensor:  # [tokens, out] model dtype
        return self.matmul(self.quantize(x, weight.data.shape[1]), weight, bias, x.dtype)


@functools.cache
def _triton_matmul() -> Callable[..., torch.Tensor] | None:
    try:
        from widebeam.kernels.fp8.triton_gemm import triton_fp8_matmul
    except ImportError:
        return None
    return triton_fp8_matmul


def _triton_rows(
    rows: Fp8Rows,
    weight: Fp8Weight,
    bias: torch.Tensor | None,
    out_dtype: torch.dtype,
    precise: bool = False,  # promoted accumulation (triton_gemm's `-x` tiles)
) -> torch.Tensor:
    matmul = _triton_matmul()
    if matmul is None:
        raise RuntimeError("the Triton FP8 GEMM needs triton (pip install triton)")
    return matmul(rows, weight, bias, out_dtype, precise=precise)


def _scaled_mm_fast_rows(
    rows: Fp8Rows, weight: Fp8Weight, bias: torch.Tensor | None, out_dtype: torch.dtype
) -> torch.Tensor:
    return scaled_mm_rows(rows, weight, bias, out_dtype, fast_accum=True)


TORCH_REFERENCE = Fp8Gemm("torch", quantize_rows, fp8_matmul_ref)
SCALED_MM = Fp8Gemm("scaled_mm", quantize_activations, scaled_mm_rows)
SCALED_MM_FAST = Fp8Gemm("scaled_mm_fast", quantize_activations, _scaled_mm_fast_rows)
TRITON = Fp8Gemm("triton", quantize_activations, _triton_rows)

# Weight shape (padded out, padded in) -> the row count from which its GEMM runs on the Triton
# kernel instead of torch._scaled_mm (on CUDA; a shape not listed never does).
TRITON_FROM_ROWS: dict[tuple[int, int], int] = {}


def gemm_for_weight(gemm: Fp8Gemm, weight: Fp8Weight) -> Fp8Gemm:
    """The path a linear of `weight` takes under `gemm`: SCALED_MM (or SCALED_MM_FAST) hands the
    calls of TRITON_FROM_ROWS' shapes with enough rows to the Triton GEMM, accumulating as that
    path does (a host-side choice by shape, which CUDA graphs capture like any other); every
    other case is `gemm` itself."""
    from_rows = TRITON_FROM_ROWS.get((weight.data.shape[0], weight.data.shape[1]))
    if gemm not in (SCALED_MM, SCALED_MM_FAST) or from_rows is None or _triton_matmul() is None:
        return gemm
    precise = gemm is SCALED_MM

    def matmul(
        rows: Fp8Rows, w: Fp8Weight, bias: torch.Tensor | None, out_dtype: torch.dtype
    ) -> torch.Tensor:
        if rows.data.shape[0] >= from_rows:
            return _triton_rows(rows, w, bias, out_dtype, precise)
        return gemm.matmul(rows, w, bias, out_dtype)

    return Fp8Gemm(f"{gemm.name}|triton>={from_rows}", quantize_activations, matmul)


def fp8_gemm_for(device: torch.device, dtype: torch.dtype, fast_accum: bool = False) -> Fp8Gemm:
    """The path for weights on `device` in activations of `dtype`; a clear error where FP8
    cannot run (an older GPU, a CUDA model not in bf16). `fast_accum` selects SCALED_MM_FAST on
    CUDA; the CPU reference is the same either way."""
    if device.type != "cuda":
        return TORCH_REFERENCE
    if dtype != torch.bfloat16:
        raise ValueError(
            f"FP8 on CUDA needs the model in bfloat16 (torch._scaled_mm's row-wise scaling "
            f"writes bf16), got {dtype}"
        )
    capability = torch.cuda.get_device_capability(device)
    if capability < MIN_CUDA_CAPABILITY:
        raise ValueError(
            f"FP8 GEMMs need CUDA compute capability {MIN_CUDA_CAPABILITY[0]}."
            f"{MIN_CUDA_CAPABILITY[1]} or newer; {device} has {capability[0]}.{capability[1]}"
        )
    return SCALED_MM_FAST if fast_accum else SCALED_MM
