"""The KV cache tensors: one flat slot space per layer, addressed by slot id.

Slot ids come from `PageAllocator` pages (slot = page * page_size + offset). Prompt KV is
written once per request; decode steps write one slot per row. Attention reads by slot id,
so re-parenting a beam only rewrites the integer slot tables, never this storage.

`kv_dtype="fp8"`: K and V are stored in float8_e4m3fn with static per-(layer, KV head) scales
(`widebeam/kernels/kv/fp8_kv.py`, chosen by `model/kv_scales.py`), half the bytes of
bfloat16; writes quantize, every attention read dequantizes.
"""

from __future__ import annotations

import numpy as np
import torch

from widebeam.kernels.kv.fp8_kv import KV_FP8_DTYPE, KvScales
from widebeam.kernels.kv.kv_write import write_kv
from widebeam.services.decoder.config import KVDType
from widebeam.services.decoder.host_copies import to_device_async

# Compiled Triton converts to and from e4m3 in hardware from this compute capability on.
FP8_MIN_CAPABILITY = (8, 9)


def kv_storage_dtype(
    kv_dtype: KVDType, model_dtype: torch.dtype, device: torch.device
) -> torch.dtype:
    """The dtype the cache stores K and V in: the model's, or FP8."""
    if kv_dtype == KVDType.AUTO:
        return model_dtype
    if device.type == "cuda":
        capability = torch.cuda.get_device_capability(device)
        if capability < FP8_MIN_CAPABILITY:
            raise ValueError(
                f"kv_dtype fp8 on CUDA needs compute capability 8.9+ (e4m3 conversions), "
                f"{device} has {capability[0]}.{capability[1]}"
            )
    return KV_FP8_DTYPE


class KVCache:
    def __init__(
        self,
        num_layers: int,
        num_slots: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,  # the storage dtype: a model dtype, or float8_e4m3fn with scales
        device: torch.device | str,
        scales: KvScales | None = None,  # FP8 only: tables of [layers, kv_heads] fp32
    ) -> None:
        if (dtype == KV_FP8_DTYPE) != (scales is not None):
            raise ValueError("an FP8 KV cache needs its scales, any other takes none")
        shape = (num_layers, num_slots, num_kv_heads, head_dim)
        # [layers, slots, kv_heads, head_dim] each
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.scales: KvScales | None = None
        # Per layer, built once: the forwards (and CUDA graphs) read these views in place.
        self.layer_scales: tuple[KvScales | None, ...] = (None,) * num_layers
        if scales is not None:
            if scales.k.shape != (num_layers, num_kv_heads) or scales.v.shape != scales.k.shape:
                raise ValueError(
                    f"KV scales of shape {tuple(scales.k.shape)} / {tuple(scales.v.shape)} for "
                    f"{num_layers} layers of {num_kv_heads} KV heads"
                )
            self.scales = KvScales(*(t.to(device=device).contiguous() for t in scales))
            self.layer_scales = tuple(self.scales.layer(i) for i in range(num_layers))

    @property
    def num_slots(self) -> int:
        return self.k.shape[1]

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """slots: [N] int64; k, v: [N, kv_heads, head_dim] (v may be a view of a fused qkv)."""
        write_kv(self.k[layer], self.v[layer], slots, k, v, self.layer_scales[layer])

    def write_rows(
        self,
        layer: int,
        slots: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        fp8_rows: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor]:  # [N, kv_heads, head_dim] x2
        """`write`, returning the rows as the cache now holds them, for attention over them (a
        prefill): k and v themselves in a model-dtype cache; in an FP8 one their FP8 values,
        widened exactly to k's dtype by the write itself (read with the layer's scales, so a
        prompt's tokens see the same keys whether prefilled now or read from cached pages, and
        the prefill kernel needs no widening pass), or with `fp8_rows` as stored (a prefill
        that multiplies FP8 operands)."""
        scales = self.layer_scales[layer]
        if scales is None:
            write_kv(self.k[layer], self.v[layer], slots, k, v)
            return k, v
        dtype = self.k.dtype if fp8_rows else k.dtype
        rows = (torch.empty(k.shape, dtype=dtype, device=k.device),
                torch.empty(v.shape, dtype=dtype, device=v.device))  # fmt: skip
        write_kv(self.k[layer], self.v[layer], slots, k, v, scales, rows)
        return rows


def slots_of_pages(pages: list[int], page_size: int, device: torch.device | str) -> torch.Tensor:
    """All slot ids of `pages`, in order: [len(pages) * page_size] int64."""
    # numpy on the host: a request's pages are a few dozen ints, where torch's per-call
    # overhead (and its list conversion) would cost more than the arithmetic.
    base = np.asarray(pages, dtype=np.int64)[:, None] * page_size
    slots = (base + np.arange(page_size, dtype=np.int64)[None, :]).reshape(-1)
    # queued: admission never waits
    return to_device_async(torch.from_numpy(slots), torch.device(device))
