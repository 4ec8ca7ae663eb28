"""Engine configuration (frozen: built once, never mutated)."""

from __future__ import annotations

from dataclasses import dataclass

DTYPES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True)
class EngineConfig:
    model_dir: str
    device: str = "cpu"
    dtype: str = "float32"
    max_rows: int = 1024  # rows (beams) decoding at once, summed over requests
    max_kv_slots: int = 1 << 18  # KV slots (tokens) in the cache, all requests together
    page_size: int = 16
    max_model_len: int | None = None  # default: the model's max_position_embeddings
    max_prefill_tokens: int = 8192  # prompt tokens prefilled in one step (one request may exceed)
    attention_backend: str = "auto"  # auto: Triton kernels on CUDA, torch reference elsewhere
    catalog_path: str | None = None  # JSONL catalog for constrained decoding
    sid_layout: str | None = None  # "BASE:SIZE,..."; default: inferred from the tokenizer

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        for name in ("max_rows", "max_kv_slots", "page_size", "max_prefill_tokens"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        if self.max_kv_slots < self.page_size:
            raise ValueError("max_kv_slots must hold at least one page")
