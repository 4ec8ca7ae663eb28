"""Attention backend selection."""

from __future__ import annotations

from widebeam.kernels.attention.base import AttentionBackend
from widebeam.kernels.attention.torch_ref import TorchAttention

BACKENDS = ("auto", "torch", "triton")


def triton_available() -> bool:
    """True when the Triton backend can be imported (kernels compile lazily, on first launch)."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def resolve_backend_name(name: str, device_type: str) -> str:
    """ "auto": the Triton kernels on CUDA when Triton is importable, else the torch reference."""
    if name != "auto":
        return name
    return "triton" if device_type == "cuda" and triton_available() else "torch"


def make_attention_backend(name: str = "torch", **options: object) -> AttentionBackend:
    """`options` go to the backend's constructor (triton: page_size, num_splits)."""
    if name == "torch":
        return TorchAttention()
    if name == "triton":
        # Imported here: triton is optional, and importing it decorates the kernels, which must
        # happen after TRITON_INTERPRET is set when tests run them on the CPU.
        from widebeam.kernels.attention.triton_backend import TritonAttention

        return TritonAttention(**options)  # type: ignore[arg-type]
    raise ValueError(f"unknown attention backend {name!r}; choose one of {', '.join(BACKENDS)}")
