"""FP8 (e4m3) KV storage: each K and V row held as `round(x / scale)` in float8_e4m3fn with one
static fp32 scale per (layer, KV head), read back as `stored * scale`.

Quantization multiplies by the reciprocal scale (computed once, `KvScales.of`) rather than
dividing, so the torch reference and the Triton write round the same fp32 product: a Triton
fp32 division need not round like torch's. Values beyond ±448 · scale saturate to ±448 (the
clamp comes before the cast: float8_e4m3fn has no infinity, and torch turns an overflow into
NaN). Rounding is to nearest, ties to even (torch's cast; the Triton write reproduces it).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from widebeam.kernels.fp8.quantize import FP8_DTYPE, FP8_MAX

KV_FP8_DTYPE = FP8_DTYPE  # torch.float8_e4m3fn


class KvScales(NamedTuple):
    """One layer's FP8 KV scales: a stored K (V) value times `k` (`v`) of its head is the value
    it stands for. Static for the cache's life: changing one would change every slot's
    meaning. Views of the cache's tables, so CUDA graphs read them in place."""

    k: torch.Tensor  # [kv_heads] fp32
    v: torch.Tensor  # [kv_heads] fp32
    k_inv: torch.Tensor  # [kv_heads] fp32, 1 / k: what a write multiplies by
    v_inv: torch.Tensor  # [kv_heads] fp32, 1 / v

    @classmethod
    def of(cls, k: torch.Tensor, v: torch.Tensor) -> KvScales:
        """From the K and V scales ([kv_heads], or [layers, kv_heads] tables: then each field
        is a table too); they must be positive and finite."""
        for name, s in (("k", k), ("v", v)):
            if s.dtype != torch.float32:
                raise ValueError(f"{name} scales must be fp32, got {s.dtype}")
            if not bool(torch.isfinite(s).all()) or not bool((s > 0).all()):
                raise ValueError(f"{name} scales must be positive and finite")
        return cls(k, v, 1.0 / k, 1.0 / v)

    def layer(self, index: int) -> KvScales:
        """Layer `index`'s scales, from tables of [layers, kv_heads] (views, no copy)."""
        return KvScales(self.k[index], self.v[index], self.k_inv[index], self.v_inv[index])


def take_rows(
    x: torch.Tensor,  # [slots, ...] any dtype
    index: torch.Tensor,  # [...] int64
) -> torch.Tensor:  # [..., ...] x[index]
    """`x[index]`, FP8 gathered as bytes: not every device's indexing kernels take FP8."""
    stored = x if x.dtype != KV_FP8_DTYPE else x.view(torch.uint8)
    rows = stored.index_select(0, index) if index.dim() == 1 else stored[index]
    return rows if x.dtype != KV_FP8_DTYPE else rows.view(KV_FP8_DTYPE)


def quantize_kv(
    x: torch.Tensor,  # [..., kv_heads, head_dim] any float dtype
    inv_scale: torch.Tensor,  # [kv_heads] fp32, KvScales.k_inv or v_inv
) -> torch.Tensor:  # [..., kv_heads, head_dim] float8_e4m3fn
    scaled = x.float() * inv_scale[:, None]
    return scaled.clamp(-FP8_MAX, FP8_MAX).to(KV_FP8_DTYPE)


def dequantize_kv(
    stored: torch.Tensor,  # [..., kv_heads, head_dim] float8_e4m3fn
    scale: torch.Tensor,  # [kv_heads] fp32, KvScales.k or v
) -> torch.Tensor:  # [..., kv_heads, head_dim] fp32
    return stored.float() * scale[:, None]
