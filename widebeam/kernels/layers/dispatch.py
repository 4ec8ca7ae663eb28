"""Which implementation a layer call uses: the Triton kernels for CUDA tensors when Triton is
importable and no gradient is wanted (they have no backward), the torch reference otherwise
(CPU, training, and the parity tests).

The `*_fp8` layers feed an FP8 GEMM: their output quantized per row
(`widebeam/kernels/fp8/quantize`).
On CUDA one kernel computes the layer and quantizes it (`triton_fp8_layers`); the reference is
the layer, then `quantize_rows`: the values the FP8 GEMM would have quantized itself."""

from __future__ import annotations

import functools
import importlib
from types import ModuleType

import torch

from widebeam.kernels.fp8.quantize import Fp8Rows, quantize_rows
from widebeam.kernels.layers.torch_ref import (
    add_rms_norm_ref,
    qk_norm_rope_ref,
    rms_norm_ref,
    silu_mul_ref,
)


def _fusable(*tensors: torch.Tensor | None) -> bool:
    given = [t for t in tensors if t is not None]
    wants_grad = torch.is_grad_enabled() and any(t.requires_grad for t in given)
    return given[0].is_cuda and not wants_grad


@functools.cache
def _triton_module(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(f"widebeam.kernels.layers.{name}")
    except ImportError:
        return None


def _triton_layers() -> ModuleType | None:
    return _triton_module("triton_layers")


def _triton_fp8_layers() -> ModuleType | None:
    return _triton_module("triton_fp8_layers")


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    fused = _triton_layers() if _fusable(x, weight) else None
    if fused is None:
        return rms_norm_ref(x, weight, eps)
    return fused.rms_norm_triton(x, weight, eps)


def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(rms_norm(x + residual), x + residual): a sublayer's residual add fused into the next
    norm."""
    fused = _triton_layers() if _fusable(x, residual, weight) else None
    if fused is None:
        return add_rms_norm_ref(x, residual, weight, eps)
    return fused.add_rms_norm_triton(x, residual, weight, eps)


def silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    fused = _triton_layers() if _fusable(gate, up) else None
    if fused is None:
        return silu_mul_ref(gate, up)
    return fused.silu_mul_triton(gate, up)


def rms_norm_fp8(x: torch.Tensor, weight: torch.Tensor, eps: float, cols: int) -> Fp8Rows:
    """rms_norm(x) [rows, D] quantized per row, zero-padded to `cols` (>= D) FP8 columns."""
    fused = _triton_fp8_layers() if _fusable(x, weight) else None
    if fused is None:
        return quantize_rows(rms_norm_ref(x, weight, eps), cols)
    return fused.rms_norm_fp8_triton(x, weight, eps, cols)


def add_rms_norm_fp8(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float, cols: int
) -> tuple[Fp8Rows, torch.Tensor]:
    """(rms_norm(x + residual) in FP8 as rms_norm_fp8, x + residual in the model dtype)."""
    fused = _triton_fp8_layers() if _fusable(x, residual, weight) else None
    if fused is None:
        normed, new_residual = add_rms_norm_ref(x, residual, weight, eps)
        return quantize_rows(normed, cols), new_residual
    return fused.add_rms_norm_fp8_triton(x, residual, weight, eps, cols)


def silu_mul_fp8(gate: torch.Tensor, up: torch.Tensor, cols: int) -> Fp8Rows:
    """silu(gate) * up [rows, I] quantized per row, zero-padded to `cols` (>= I)."""
    fused = _triton_fp8_layers() if _fusable(gate, up) else None
    if fused is None:
        return quantize_rows(silu_mul_ref(gate, up), cols)
    return fused.silu_mul_fp8_triton(gate, up, cols)


def qk_norm_rope(
    q: torch.Tensor,  # [N, Hq, D]
    k: torch.Tensor,  # [N, Hkv, D]
    cos: torch.Tensor,  # [N, D] fp32
    sin: torch.Tensor,  # [N, D] fp32
    q_weight: torch.Tensor | None,  # [D] per-head norm weights (Qwen3), None: rope only
    k_weight: torch.Tensor | None,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-head RMSNorm of q and k (when weighted), then rope: see torch_ref.qk_norm_rope_ref."""
    fused = _triton_module("triton_rope") if _fusable(q, k, q_weight, k_weight) else None
    if fused is None:
        return qk_norm_rope_ref(q, k, cos, sin, q_weight, k_weight, eps)
    return fused.qk_norm_rope_triton(q, k, cos, sin, q_weight, k_weight, eps)
