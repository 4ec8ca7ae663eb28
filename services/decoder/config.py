"""Engine configuration (frozen: built once, never mutated)."""

from __future__ import annotations

from dataclasses import dataclass

DTYPES = ("float32", "bfloat16", "float16")
BEAM_EXPANSIONS = ("streamed", "dense")


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
    # streamed: beam candidates from hidden states in row chunks (never [rows, vocab] fp32);
    # dense: full log-prob rows for every beam (transformers' way; the reference)
    beam_expansion: str = "streamed"
    # Up to this many beam scores (k * vocab) a request ranks them densely either way, which
    # keeps transformers' exact tie order for small requests.
    dense_expansion_limit: int = 1 << 22
    # streamed beam requests in lockstep (same width, step, parameters) advance as one batch
    batch_beam_steps: bool = True
    # CUDA + Triton: replay decode steps from CUDA graphs of bucketed shapes (False: the same
    # bucketed shapes, eagerly)
    cuda_graphs: bool = True
    # CUDA + Triton: prefill batches of up to 2048 tokens (where launches, not kernels, bound
    # them) at bucketed token counts too, replayed from CUDA graphs when cuda_graphs (else
    # eagerly at the same shapes); larger batches run eagerly
    prefill_graphs: bool = True
    # prepare each decode step on the host while the device finishes the previous one
    overlap_scheduling: bool = True
    catalog_path: str | None = None  # JSONL catalog for constrained decoding
    sid_layout: str | None = None  # "BASE:SIZE,..."; default: inferred from the tokenizer

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.beam_expansion not in BEAM_EXPANSIONS:
            raise ValueError(
                f"beam_expansion must be one of {', '.join(BEAM_EXPANSIONS)}, "
                f"got {self.beam_expansion!r}"
            )
        if self.dense_expansion_limit < 0:
            raise ValueError("dense_expansion_limit must be >= 0")
        for name in ("max_rows", "max_kv_slots", "page_size", "max_prefill_tokens"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        if self.max_kv_slots < self.page_size:
            raise ValueError("max_kv_slots must hold at least one page")
