"""`TritonAttention`: the GPU backend (Triton cascade decode + ragged causal prefill).

`decode` accepts the engine's `DecodeBatch` (packed once per batch object and reused by every
layer) or a `PackedDecode` the caller built itself (static buffers for CUDA graphs); `prefill`
likewise a `PrefillBatch` or a `PackedPrefill`.
"""

from __future__ import annotations

import torch

from widebeam.kernels.attention.base import AttentionBackend
from widebeam.kernels.attention.metadata import DecodeBatch, PackedPrefill, PrefillBatch
from widebeam.kernels.attention.packed import PackedDecode, pack_decode
from widebeam.kernels.attention.triton_cascade import cascade_decode_packed
from widebeam.kernels.attention.triton_common import (
    default_block_rows,
    default_num_splits,
)
from widebeam.kernels.attention.triton_prefill import (
    prefill_block_q,
    prefill_work,
    ragged_causal_prefill,
)


class TritonAttention(AttentionBackend):
    name = "triton"

    def __init__(self, page_size: int = 1, num_splits: int | None = None) -> None:
        """page_size > 1 packs prompts as page tables (the engine's 16-slot pages);
        num_splits None = choose per batch from the grid size and the longest prompt."""
        self.page_size = page_size
        self.num_splits = num_splits
        # One batch object serves every layer of a step: pack once, keyed by identity (the
        # reference keeps the object alive, so its id cannot be reused meanwhile).
        self._decode_key: tuple[DecodeBatch, int, int, int] | None = None
        self._decode_packed: PackedDecode | None = None
        self._prefill_key: tuple[tuple[int, ...], int, str] | None = None
        self._prefill_work: torch.Tensor | None = None

    def pack(self, batch: DecodeBatch, rows: int, q_heads: int, kv_heads: int) -> PackedDecode:
        key = (batch, rows, q_heads, kv_heads)
        last = self._decode_key
        if last is not None and last[0] is batch and last[1:] == key[1:]:
            assert self._decode_packed is not None
            return self._decode_packed
        max_rows = max((g.num_rows for g in batch.groups), default=1)
        block_rows = default_block_rows(q_heads, kv_heads, max_rows)
        splits = self.num_splits
        if splits is None:
            items = sum(-(-g.num_rows // block_rows) for g in batch.groups)
            longest = max((int(g.prompt_slots.shape[0]) for g in batch.groups), default=0)
            device = batch.groups[0].prompt_slots.device if batch.groups else torch.device("cpu")
            splits = default_num_splits(items * kv_heads, longest, device)
        packed = pack_decode(
            batch, rows, block_rows=block_rows, num_splits=splits, page_size=self.page_size
        )
        self._decode_key, self._decode_packed = key, packed
        return packed

    def prefill(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        batch: PrefillBatch | PackedPrefill,
        scale: float,
    ) -> torch.Tensor:
        block_q = prefill_block_q(q.shape[1], k.shape[1])
        if isinstance(batch, PackedPrefill):  # a CUDA-graph bucket's static work list
            whole = (0, q.shape[0])
            return ragged_causal_prefill(q, k, v, whole, scale, work=batch.work, block_q=block_q)
        key = (batch.cu_seqlens, block_q, str(q.device))
        if self._prefill_key != key:  # every layer of one prefill shares the work list
            self._prefill_key = key
            self._prefill_work = prefill_work(batch.cu_seqlens, block_q, q.device)
        assert self._prefill_work is not None
        return ragged_causal_prefill(
            q, k, v, batch.cu_seqlens, scale, work=self._prefill_work, block_q=block_q
        )

    def decode(
        self,
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        batch: DecodeBatch | PackedDecode,
        scale: float,
    ) -> torch.Tensor:
        if isinstance(batch, DecodeBatch):
            batch = self.pack(batch, q.shape[0], q.shape[1], k_cache.shape[1])
        return cascade_decode_packed(q, k_cache, v_cache, batch, scale)
