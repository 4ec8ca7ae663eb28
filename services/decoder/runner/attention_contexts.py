"""Attention contexts the model calls per layer: write this batch's KV, then attend."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from widebeam.kernels.attention.base import AttentionBackend
from widebeam.services.decoder.kv.kv_cache import KVCache


@dataclass(frozen=True)
class PrefillContext:
    cache: KVCache
    write_slots: torch.Tensor  # [N] int64, prompt slots of the packed tokens
    # the backend's prepare_prefill result, or a CUDA-graph bucket's static buffers
    metadata: object
    backend: AttentionBackend
    scale: float

    def attend(
        self, layer_idx: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> torch.Tensor:  # q [N, Hq, D]; k, v [N, Hkv, D] -> [N, Hq, D]
        self.cache.write(layer_idx, self.write_slots, k, v)
        return self.backend.prefill(q, k, v, self.metadata, self.scale)


@dataclass(frozen=True)
class DecodeContext:
    cache: KVCache
    write_slots: torch.Tensor  # [R] int64, one new slot per row
    # the backend's prepare_decode result, or a CUDA-graph bucket's static buffers
    metadata: object
    backend: AttentionBackend
    scale: float

    def attend(
        self, layer_idx: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> torch.Tensor:  # q [R, Hq, D]; k, v [R, Hkv, D] -> [R, Hq, D]
        self.cache.write(layer_idx, self.write_slots, k, v)
        k_cache, v_cache = self.cache.k[layer_idx], self.cache.v[layer_idx]
        return self.backend.decode(q, k_cache, v_cache, self.metadata, self.scale)
