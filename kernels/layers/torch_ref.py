"""The reference layers, in transformers' order of operations and rounding points."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def rms_norm_ref(
    x: torch.Tensor,  # [..., D] model dtype
    weight: torch.Tensor,  # [D] model dtype
    eps: float,
) -> torch.Tensor:  # [..., D] model dtype
    """Normalise in fp32, cast back, then scale by the weight (HF's order: matters in bf16)."""
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


def silu_mul_ref(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:  # [N, I] each
    return F.silu(gate) * up
