"""A batch's K and V rows written to their cache slots: one Triton launch for both on CUDA
(at 5000 decode rows, two `index_copy_` calls per layer cost about three times as long), the
torch reference otherwise. An FP8 cache (`fp8_kv.py`) takes its rows quantized by its layer's
scales, in the same launch; a prefill also gets the rows as stored (`rows_out`), for an FP8
cache already widened to the model dtype if it asks (every e4m3 value is exact in bf16, fp16
and fp32), so its attention needs no widening pass of its own."""

from __future__ import annotations

import functools
from types import ModuleType

import torch

from widebeam.kernels.kv.fp8_kv import KV_FP8_DTYPE, KvScales, quantize_kv


def check_scales(cache: torch.Tensor, scales: KvScales | None) -> None:
    """An FP8 cache needs its layer's scales; a cache in a model dtype takes none."""
    if (cache.dtype == KV_FP8_DTYPE) != (scales is not None):
        raise ValueError(
            f"a {cache.dtype} KV cache "
            + ("needs its layer's KvScales" if scales is None else "takes no KvScales")
        )


# What `rows_out` may hold beside the cache's own dtype, for an FP8 cache: its values exactly.
FP8_WIDENED_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def check_rows_out(
    cache: torch.Tensor,  # [slots, kv_heads, head_dim] one layer's K cache
    k: torch.Tensor,  # [N, kv_heads, head_dim]
    rows_out: tuple[torch.Tensor, torch.Tensor] | None,
) -> None:
    """Two tensors of k's shape, both in the cache's dtype or (an FP8 cache) one that holds
    its values exactly."""
    if rows_out is None:
        return
    dtypes = {r.dtype for r in rows_out}
    allowed = {cache.dtype, *(FP8_WIDENED_DTYPES if cache.dtype == KV_FP8_DTYPE else ())}
    if any(r.shape != k.shape for r in rows_out) or len(dtypes) != 1 or not dtypes <= allowed:
        names = " or ".join(sorted(str(d) for d in allowed))
        raise ValueError(
            f"rows_out must be two tensors of shape {tuple(k.shape)} in {names}, got "
            f"{[(tuple(r.shape), r.dtype) for r in rows_out]}"
        )


def write_kv_ref(
    k_cache: torch.Tensor,  # [slots, kv_heads, head_dim] one layer's cache
    v_cache: torch.Tensor,  # [slots, kv_heads, head_dim]
    slots: torch.Tensor,  # [N] int64 target slot of each row
    k: torch.Tensor,  # [N, kv_heads, head_dim] any strides
    v: torch.Tensor,  # [N, kv_heads, head_dim] any strides
    scales: KvScales | None = None,  # the layer's, for an FP8 cache
    rows_out: tuple[torch.Tensor, torch.Tensor] | None = None,  # [N, kv_heads, head_dim] x2
) -> None:
    """`rows_out`: also receives the rows as stored (a prefill attends over exactly those), in
    its own dtype (`check_rows_out`)."""
    check_scales(k_cache, scales)
    check_rows_out(k_cache, k, rows_out)
    if scales is None:
        k_rows, v_rows = k.to(k_cache.dtype), v.to(v_cache.dtype)
    else:
        k_rows, v_rows = quantize_kv(k, scales.k_inv), quantize_kv(v, scales.v_inv)
    _index_copy(k_cache, slots, k_rows)
    _index_copy(v_cache, slots, v_rows)
    if rows_out is not None:
        rows_out[0].copy_(k_rows)
        rows_out[1].copy_(v_rows)


def _index_copy(cache: torch.Tensor, slots: torch.Tensor, rows: torch.Tensor) -> None:
    if cache.dtype == KV_FP8_DTYPE:  # index_copy_ has no FP8 kernel on the CPU: copy the bytes
        cache, rows = cache.view(torch.uint8), rows.view(torch.uint8)
    cache.index_copy_(0, slots, rows)


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
    scales: KvScales | None = None,
    rows_out: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> None:
    """`write_kv_ref`'s effect (rows sharing a slot: one of them wins, as with index_copy_)."""
    fused = _triton() if k.is_cuda else None
    if fused is None or not fused.supports(k_cache, k, v, rows_out):
        write_kv_ref(k_cache, v_cache, slots, k, v, scales, rows_out)
        return
    fused.write_kv_triton(k_cache, v_cache, slots, k, v, scales, rows_out)
