"""The attention backend interface: prefill over ragged prompts, cascade decode over slots."""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from widebeam.kernels.attention.metadata import DecodeBatch, PrefillBatch


class AttentionBackend(ABC):
    name: str = "base"

    @abstractmethod
    def prefill(
        self,
        q: torch.Tensor,  # [N, q_heads, head_dim]
        k: torch.Tensor,  # [N, kv_heads, head_dim]
        v: torch.Tensor,  # [N, kv_heads, head_dim]
        batch: PrefillBatch,
        scale: float,
    ) -> torch.Tensor:  # [N, q_heads, head_dim], dtype of q
        """Causal attention within each prompt segment."""

    @abstractmethod
    def decode(
        self,
        q: torch.Tensor,  # [R, q_heads, head_dim]
        k_cache: torch.Tensor,  # [slots, kv_heads, head_dim] one layer
        v_cache: torch.Tensor,  # [slots, kv_heads, head_dim] one layer
        batch: DecodeBatch,
        scale: float,
    ) -> torch.Tensor:  # [R, q_heads, head_dim], dtype of q
        """Each row attends to its request's prompt KV and its own suffix slots."""
