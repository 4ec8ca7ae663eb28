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


def add_rms_norm_ref(
    x: torch.Tensor,  # [..., D] model dtype, e.g. a sublayer's output
    residual: torch.Tensor,  # [..., D] model dtype, the residual stream
    weight: torch.Tensor,  # [D] model dtype
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor]:  # (normed, new residual), both [..., D] model dtype
    """The residual add (stored in the model dtype, as HF's ``h = h + out``), then its norm."""
    new_residual = x + residual
    return rms_norm_ref(new_residual, weight, eps), new_residual


def silu_mul_ref(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:  # [N, I] each
    return F.silu(gate) * up


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary_ref(
    x: torch.Tensor,  # [N, heads, head_dim]
    cos: torch.Tensor,  # [N, head_dim] fp32
    sin: torch.Tensor,  # [N, head_dim] fp32
) -> torch.Tensor:
    """HF convention: tables are cast to the activation dtype before the product."""
    cos = cos.to(x.dtype)[:, None, :]
    sin = sin.to(x.dtype)[:, None, :]
    return x * cos + rotate_half(x) * sin


def qk_norm_rope_ref(
    q: torch.Tensor,  # [N, Hq, D] model dtype
    k: torch.Tensor,  # [N, Hkv, D] model dtype
    cos: torch.Tensor,  # [N, D] fp32
    sin: torch.Tensor,  # [N, D] fp32
    q_weight: torch.Tensor | None,  # [D] per-head norm weights (Qwen3), or None for no norm
    k_weight: torch.Tensor | None,
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor]:  # rotated q, k (contiguous, model dtype)
    """Qwen3's per-head RMSNorm of q and k (skipped without weights), then rope on both."""
    if (q_weight is None) != (k_weight is None):
        raise ValueError("q and k norm weights must be given together")
    if q_weight is not None and k_weight is not None:
        q, k = rms_norm_ref(q, q_weight, eps), rms_norm_ref(k, k_weight, eps)
    return apply_rotary_ref(q, cos, sin), apply_rotary_ref(k, cos, sin)
