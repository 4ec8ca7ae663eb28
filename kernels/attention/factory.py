"""Attention backend selection."""

from __future__ import annotations

from widebeam.kernels.attention.base import AttentionBackend
from widebeam.kernels.attention.torch_ref import TorchAttention

BACKENDS = ("torch",)


def make_attention_backend(name: str = "torch") -> AttentionBackend:
    if name == "torch":
        return TorchAttention()
    raise ValueError(f"unknown attention backend {name!r}; choose one of {', '.join(BACKENDS)}")
