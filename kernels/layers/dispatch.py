"""Which implementation a layer call uses: the Triton kernels for CUDA tensors when Triton is
importable and no gradient is wanted (they have no backward), the torch reference otherwise
(CPU, training, and the parity tests)."""

from __future__ import annotations

import functools

import torch

from widebeam.kernels.layers.torch_ref import rms_norm_ref, silu_mul_ref


def _fusable(*tensors: torch.Tensor) -> bool:
    wants_grad = torch.is_grad_enabled() and any(t.requires_grad for t in tensors)
    return tensors[0].is_cuda and not wants_grad


@functools.cache
def _triton_layers() -> object | None:
    try:
        from widebeam.kernels.layers import triton_layers
    except ImportError:
        return None
    return triton_layers


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    fused = _triton_layers() if _fusable(x, weight) else None
    if fused is None:
        return rms_norm_ref(x, weight, eps)
    return fused.rms_norm_triton(x, weight, eps)  # type: ignore[attr-defined]


def silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    fused = _triton_layers() if _fusable(gate, up) else None
    if fused is None:
        return silu_mul_ref(gate, up)
    return fused.silu_mul_triton(gate, up)  # type: ignore[attr-defined]
