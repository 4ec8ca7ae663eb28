"""Batch descriptions handed to attention backends (built by the decoder's model runner)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class AttentionLayout:
    """The model's attention shapes and the cache's dtype, fixed for a runner's life: what a
    backend needs to build a batch's metadata before any layer runs (tile choices, plans)."""

    q_heads: int
    kv_heads: int
    head_dim: int
    q_dtype: torch.dtype  # of the queries (the model's activations)
    kv_dtype: torch.dtype  # of the KV cache
    scale: float  # softmax scale
    device: torch.device  # of the KV cache
    cache_slots: int = 0  # of the KV cache (sizes graph buffers that index it); 0 = unknown


@dataclass(frozen=True)
class PrefillBatch:
    """Ragged prompts packed back to back; segment i is tokens cu_seqlens[i]:cu_seqlens[i+1]."""

    cu_seqlens: tuple[int, ...]


@dataclass(frozen=True)
class PackedPrefill:
    """A prefill batch as a static list of query blocks (what a CUDA graph replays): items are
    (segment start, segment end, block's first query token); padding items (0, 0, 0) cover no
    query. Built with `triton_prefill.prefill_work` for the backend's block size."""

    work: torch.Tensor  # [3, B] int32


@dataclass(frozen=True)
class DecodeGroup:
    """One request's rows in a decode batch: rows row_start .. row_start + num_rows - 1.

    All rows share the request's prompt KV (`prompt_slots`) and each reads its own private
    suffix (`suffix_slots[row]`, oldest first, ending with the slot written this step).
    """

    row_start: int
    num_rows: int
    prompt_slots: torch.Tensor  # [prompt_len] int64
    suffix_slots: torch.Tensor  # [num_rows, suffix_len] int64


@dataclass(frozen=True)
class DecodeBatch:
    groups: tuple[DecodeGroup, ...]
