"""The KV cache tensors: one flat slot space per layer, addressed by slot id.

Slot ids come from `PageAllocator` pages (slot = page * page_size + offset). Prompt KV is
written once per request; decode steps write one slot per row. Attention reads by slot id,
so re-parenting a beam only rewrites the integer slot tables, never this storage.
"""

from __future__ import annotations

import torch

from widebeam.kernels.kv.kv_write import write_kv
from widebeam.services.decoder.host_copies import to_device_async


class KVCache:
    def __init__(
        self,
        num_layers: int,
        num_slots: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device | str,
    ) -> None:
        shape = (num_layers, num_slots, num_kv_heads, head_dim)
        # [layers, slots, kv_heads, head_dim] each
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)

    @property
    def num_slots(self) -> int:
        return self.k.shape[1]

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """slots: [N] int64; k, v: [N, kv_heads, head_dim] (v may be a view of a fused qkv)."""
        write_kv(self.k[layer], self.v[layer], slots, k, v)


def slots_of_pages(pages: list[int], page_size: int, device: torch.device | str) -> torch.Tensor:
    """All slot ids of `pages`, in order: [len(pages) * page_size] int64."""
    base = torch.tensor(pages, dtype=torch.int64)[:, None] * page_size
    slots = (base + torch.arange(page_size)[None, :]).reshape(-1)
    return to_device_async(slots, torch.device(device))  # queued: admission never waits
