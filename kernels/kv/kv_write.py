"""A batch's K and V rows written to their cache slots: one Triton launch for both on CUDA
(at 5000 decode rows, two `index_copy_` calls per layer cost about three times as long), the
torch reference otherwise."""

from __future__ import annotations

import functools
from types import ModuleType

import torch


def write_kv_ref(
    k_cache: torch.Tensor,  # [slots, kv_heads, head_dim] one layer's cache
    v_cache: torch.Tensor,  # [slots, kv_heads, head_dim]
    slots: torch.Tensor,  # [N] int64 target slot of each row
    k: torch.Tensor,  # [N, kv_heads, head_dim] any strides
    v: torch.Tensor,  # [N, kv_heads, head_dim] any strides
) -> None:
    k_cache.index_copy_(0, slots, k.to(k_cache.dtype))
    v_cache.index_copy_(0, slots, v.to(v_cache.dtype))


@functools.cache
def _triton() -> ModuleType | None:
    try:
        from widebeam.kernels.kv import triton_kv_write
    except ImportError:
        return None
    return triton_kv_write


def write_kv(
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slots: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
) -> None:
    """`write_kv_ref`'s effect (rows sharing a slot: one of them wins, as with index_copy_)."""
    fused = _triton() if k.is_cuda else None
    if fused is None or not fused.supports(k_cache, k, v):
        write_kv_ref(k_cache, v_cache, slots, k, v)
        return
    fused.write_kv_triton(k_cache, v_cache, slots, k, v)
