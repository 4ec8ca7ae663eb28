"""Which FP8 GEMM a device runs, decided here once: `torch._scaled_mm` on CUDA, the plain-torch
reference elsewhere. The model's FP8 linears hold the chosen object; nothing else names a path."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from widebeam.kernels.fp8.quantize import Fp8Weight
from widebeam.kernels.fp8.scaled_mm import fp8_linear_scaled_mm
from widebeam.kernels.fp8.torch_ref import fp8_linear_ref

# torch._scaled_mm's row-wise FP8 GEMM needs Ada (8.9) or Hopper and later.
MIN_CUDA_CAPABILITY = (8, 9)

LinearFn = Callable[[torch.Tensor, Fp8Weight, torch.Tensor | None], torch.Tensor]


@dataclass(frozen=True)
class Fp8Gemm:
    """One FP8 GEMM path: `linear(x [tokens, in], weight, bias [out] | None) -> [tokens, out]`."""

    name: str
    linear: LinearFn


TORCH_REFERENCE = Fp8Gemm("torch", fp8_linear_ref)
SCALED_MM = Fp8Gemm("scaled_mm", fp8_linear_scaled_mm)


def fp8_gemm_for(device: torch.device, dtype: torch.dtype) -> Fp8Gemm:
    """The path for weights on `device` in activations of `dtype`; a clear error where FP8
    cannot run (an older GPU, a CUDA model not in bf16)."""
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
    return SCALED_MM
