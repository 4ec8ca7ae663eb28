"""Attention contexts the model calls per layer: write this batch's KV, then attend.

With an FP8 cache every attention reads K and V as the cache holds them, with the layer's
scales: decode and cached prefixes from the cache, a prefill's fresh rows as the write stored
them (`KVCache.write_rows`), so a cached prefix and a fresh prefill of it give the same keys."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch

from widebeam.kernels.attention.base import AttentionBackend
from widebeam.kernels.kv.fp8_kv import take_rows
from widebeam.services.decoder.kv.kv_cache import KVCache


@dataclass(frozen=True)
class _WritingContext(ABC):
    cache: KVCache
    write_slots: torch.Tensor  # [N] int64, the slot of each token's (row's) new KV
    # the backend's prepare_prefill / prepare_decode result, or a CUDA-graph bucket's buffers
    metadata: object
    backend: AttentionBackend
    scale: float

    @abstractmethod
    def attend(
        self, layer_idx: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> torch.Tensor:  # q [N, Hq, D]; k, v [N, Hkv, D] -> [N, Hq, D]
        """Write k and v to their slots, then attend."""


class PrefillContext(_WritingContext):
    """Packed prompt tokens: each attends causally within its prompt (the batch's own K, V)."""

    def attend(
        self, layer_idx: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> torch.Tensor:
        fp8_rows = self.backend.prefill_takes_fp8_rows
        k, v = self.cache.write_rows(layer_idx, self.write_slots, k, v, fp8_rows)
        scales = self.cache.layer_scales[layer_idx]
        return self.backend.prefill(q, k, v, self.metadata, self.scale, scales)


@dataclass(frozen=True)
class PrefixPrefillContext(_WritingContext):
    """Packed prompt suffixes after cached prefixes (`prefix_prefill.py`): the metadata
    describes whole prompts; each layer reads their K, V from the cache, once this batch's are
    written, and attends with zero queries at the cached positions (their outputs dropped)."""

    full_slots: torch.Tensor  # [F] int64, every prompt's slots in order
    query_index: torch.Tensor  # [N] int64, each new token's row among the F

    def attend(
        self, layer_idx: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> torch.Tensor:
        self.cache.write(layer_idx, self.write_slots, k, v)
        k_full = take_rows(self.cache.k[layer_idx], self.full_slots)  # [F, Hkv, D]
        v_full = take_rows(self.cache.v[layer_idx], self.full_slots)
        q_full = q.new_zeros((self.full_slots.shape[0], *q.shape[1:]))  # [F, Hq, D]
        q_full.index_copy_(0, self.query_index, q)
        scales = self.cache.layer_scales[layer_idx]
        out = self.backend.prefill(q_full, k_full, v_full, self.metadata, self.scale, scales)
        return out.index_select(0, self.query_index)


class DecodeContext(_WritingContext):
    """One new token per row: each attends over its prompt and suffix slots in the cache."""

    def attend(
        self, layer_idx: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> torch.Tensor:
        self.cache.write(layer_idx, self.write_slots, k, v)
        k_cache, v_cache = self.cache.k[layer_idx], self.cache.v[layer_idx]
        scales = self.cache.layer_scales[layer_idx]
        return self.backend.decode(q, k_cache, v_cache, self.metadata, self.scale, scales)
