"""The Triton KV write: one program per row copies its K and V heads to the row's slot."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _kv_write_kernel(
    k_ptr, v_ptr, slots_ptr, k_cache_ptr, v_cache_ptr,
    stride_kn, stride_kh, stride_vn, stride_vh,
    HEADS: tl.constexpr, BLOCK_H: tl.constexpr, D: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    slot = tl.load(slots_ptr + row).to(tl.int64)
    h = tl.arange(0, BLOCK_H)[:, None]
    d = tl.arange(0, D)[None, :]
    inside = h < HEADS
    k = tl.load(k_ptr + row * stride_kn + h * stride_kh + d, mask=inside)
    v = tl.load(v_ptr + row * stride_vn + h * stride_vh + d, mask=inside)
    dst = slot * (HEADS * D) + h * D + d
    tl.store(k_cache_ptr + dst, k.to(k_cache_ptr.dtype.element_ty), mask=inside)
    tl.store(v_cache_ptr + dst, v.to(v_cache_ptr.dtype.element_ty), mask=inside)


def supports(k_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    """A contiguous cache, unit-stride head rows and a power-of-two head size."""
    dim = k_cache.shape[-1]
    return (
        k_cache.is_contiguous()
        and k.stride(-1) == 1
        and v.stride(-1) == 1
        and dim == triton.next_power_of_2(dim)
    )


def write_kv_triton(
    k_cache: torch.Tensor,  # [slots, kv_heads, head_dim] contiguous
    v_cache: torch.Tensor,  # [slots, kv_heads, head_dim] contiguous
    slots: torch.Tensor,  # [N] int64
    k: torch.Tensor,  # [N, kv_heads, head_dim] unit stride along head_dim
    v: torch.Tensor,  # [N, kv_heads, head_dim] unit stride along head_dim
) -> None:
    rows, heads, dim = k.shape
    if v.shape != k.shape or k_cache.shape[1:] != k.shape[1:] or v_cache.shape != k_cache.shape:
        raise ValueError(
            f"k {tuple(k.shape)}, v {tuple(v.shape)} and caches {tuple(k_cache.shape)} / "
            f"{tuple(v_cache.shape)} disagree"
        )
    if rows == 0:
        return
    _kv_write_kernel[(rows,)](
        k, v, slots, k_cache, v_cache,
        k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        HEADS=heads, BLOCK_H=triton.next_power_of_2(heads), D=dim,
    )  # fmt: skip
