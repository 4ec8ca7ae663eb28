"""Attention backend selection."""

from __future__ import annotations

from widebeam.kernels.attention.base import AttentionBackend
from widebeam.kernels.attention.torch_ref import TorchAttention

BACKENDS = ("auto", "torch", "triton", "flashinfer")


def triton_available() -> bool:
    """True when the Triton backend can be imported (kernels compile lazily, on first launch)."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def resolve_backend_name(name: str, device_type: str) -> str:
    """ "auto": the Triton kernels on CUDA when Triton is importable, else the torch reference.
    FlashInfer is never picked automatically: it is an optional package, and its eager steps
    measured level with eager Triton (docs/benchmarks.md)."""
    if name != "auto":
        return name
    return "triton" if device_type == "cuda" and triton_available() else "torch"


def make_attention_backend(
    name: str = "torch",
    *,
    page_size: int = 1,
    shared_suffix: bool = True,
    fp8_queries: bool = False,
    fp8_probabilities: bool = False,
    **options: object,
) -> AttentionBackend:
    """`page_size`: the KV cache's slots per page; the triton backend addresses prompts by page
    with it (torch reads slot lists, flashinfer views the cache as one-slot pages).
    `shared_suffix`: triton reads beams' shared generated tokens once per ancestor group (the
    others read every row's suffix on its own). `fp8_queries`: over an FP8 cache, decode's
    scores over the prompt take queries rounded to FP8 (torch and triton); `fp8_probabilities`:
    their probabilities rounded to FP8 (`fp8_probabilities.py`). `options` go to the
    backend's constructor (triton: num_splits; flashinfer: workspace_bytes)."""
    for flag, on in (("fp8_queries", fp8_queries), ("fp8_probabilities", fp8_probabilities)):
        if on and name not in ("torch", "triton"):
            raise ValueError(f"{flag} needs the torch or triton attention backend, not {name!r}")
    if name == "torch":
        return TorchAttention(fp8_queries=fp8_queries, fp8_probabilities=fp8_probabilities)
    if name == "triton":
        # Imported here: triton is optional, and importing it decorates the kernels, which must
        # happen after TRITON_INTERPRET is set when tests run them on the CPU.
        from widebeam.kernels.attention.triton_backend import TritonAttention

        return TritonAttention(
            page_size=page_size,
            shared_suffix=shared_suffix,
            fp8_queries=fp8_queries,
            fp8_probabilities=fp8_probabilities,
            **options,  # type: ignore[arg-type]
        )
    if name == "flashinfer":  # optional package; its absence is a clear ValueError
        from widebeam.kernels.attention.flashinfer_backend import FlashInferAttention

        return FlashInferAttention(**options)  # type: ignore[arg-type]
    raise ValueError(f"unknown attention backend {name!r}; choose one of {', '.join(BACKENDS)}")
