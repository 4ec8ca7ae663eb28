"""Engine configuration (frozen: built once, never mutated).

Every field is also a decoder service setting (`WIDEBEAM_DECODER_*`, a `widebeam decoder serve`
flag): `server/settings.py` derives them from `dataclasses.fields(EngineConfig)`, with each
field's `help` metadata as their description. A field added here is settable in production
without touching the server.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from widebeam.services.catalog.default_name import DEFAULT_CATALOG


class DType(StrEnum):
    """Weights, activations and KV cache dtype (a torch dtype's name)."""

    FLOAT32 = "float32"
    BFLOAT16 = "bfloat16"
    FLOAT16 = "float16"


class BeamExpansion(StrEnum):
    """How a beam step finds its candidates."""

    # beam candidates from hidden states in row chunks (never [rows, vocab] fp32)
    STREAMED = "streamed"
    # full log-prob rows for every beam (transformers' way; the reference)
    DENSE = "dense"


class Quantization(StrEnum):
    """How the decoder layers' linear weights are served."""

    # in the model dtype
    NONE = "none"
    # W8A8: float8_e4m3fn weights per output channel, activations quantized per token
    FP8 = "fp8"


class Fp8Accumulation(StrEnum):
    """How the FP8 GEMMs sum their products on CUDA (with quantization fp8)."""

    # Hopper's tensor cores keep FP8 partial sums in their reduced internal precision over the
    # whole K loop (torch._scaled_mm(use_fast_accum=True); vLLM's and SGLang's FP8 kernels)
    FAST = "fast"
    # partial sums promoted to fp32 as K goes (every 128 products on Hopper)
    PRECISE = "precise"


class KVDType(StrEnum):
    """How the KV cache stores K and V."""

    # in the model dtype
    AUTO = "auto"
    # float8_e4m3fn with static fp32 scales per layer and KV head (widebeam/kernels/kv/fp8_kv.py)
    FP8 = "fp8"


# The KV cache size when neither max_kv_slots nor kv_memory_fraction is given.
DEFAULT_KV_SLOTS = 1 << 18


def _help(text: str) -> dict[str, str]:
    """A field's metadata: the help text its setting and flag show."""
    return {"help": text}


def _values(enum: type[StrEnum]) -> str:
    return ", ".join(member.value for member in enum)


def is_cuda_device(device: str) -> bool:
    """`cuda` or `cuda:N` (the only devices whose free memory can size the KV cache)."""
    return device.split(":", 1)[0] == "cuda"


@dataclass(frozen=True)
class EngineConfig:
    model_dir: str = field(
        metadata=_help("HF model directory (config.json + safetensors + tokenizer)")
    )
    device: str = field(default="cpu", metadata=_help("cpu | cuda | cuda:N"))
    dtype: DType = field(
        default=DType.FLOAT32, metadata=_help("weights, activations and KV cache dtype")
    )
    quantization: Quantization = field(
        default=Quantization.NONE,
        metadata=_help(
            "none | fp8 (W8A8: the decoder layers' linear weights in float8_e4m3fn per output "
            "channel, activations quantized per token; the norms stay in dtype, the LM head "
            "too unless head_quantization; CUDA needs bfloat16 and compute capability 8.9+)"
        ),
    )
    fp8_accumulation: Fp8Accumulation = field(
        default=Fp8Accumulation.FAST,
        metadata=_help(
            "fast | precise: how the FP8 GEMMs (quantization fp8) sum their products on CUDA; "
            "fast keeps partial sums in the tensor cores' reduced precision over the whole K "
            "loop (torch._scaled_mm's use_fast_accum, as vLLM and SGLang serve FP8): on an H200 "
            "FP8 layers ran 1.46x bf16 against 1.31x precise, for an extra 0.2% relative error "
            "beside FP8's own 3.75%; precise promotes them to fp32 as K goes. CUDA only: the CPU "
            "reference sums in fp32 either way"
        ),
    )
    head_quantization: Quantization = field(
        default=Quantization.NONE,
        metadata=_help(
            "none | fp8: the LM head's GEMM in W8A8 too (its weight in float8_e4m3fn per "
            "vocabulary row, the final hidden states quantized per token, the logits in dtype); "
            "needs quantization fp8. Off by default: bench/fp8_quality.py --head-quantization "
            "fp8 measures what it costs in recall before a deployment turns it on"
        ),
    )
    kv_dtype: KVDType = field(
        default=KVDType.AUTO,
        metadata=_help(
            "auto | fp8 (K and V stored in float8_e4m3fn with static fp32 scales per layer and KV "
            "head: the checkpoint's k_scale / v_scale, else bounds derived from the weights; "
            "half the bytes of bfloat16, so kv_memory_fraction holds twice the slots; attention "
            "dequantizes and accumulates in fp32; CUDA needs compute capability 8.9+; not with "
            "attention_backend flashinfer)"
        ),
    )
    kv_fp8_queries: bool = field(
        default=False,
        metadata=_help(
            "kv_dtype fp8: a prefill's scores and a decode step's scores over the prompt "
            "multiply queries rounded to FP8 (per token and head, as the FP8 GEMMs' "
            "activations) with the keys as stored, on FP8 tensor cores (Triton; the torch "
            "reference rounds them the same way), so no key tile is widened. Off by default: "
            "bench/fp8_quality.py --kv-fp8-queries measures its recall cost first"
        ),
    )
    kv_fp8_probabilities: bool = field(
        default=False,
        metadata=_help(
            "kv_dtype fp8: a prefill's attention probabilities and a decode step's over the "
            "prompt rounded to FP8 (against the row's maximum rounded up to a power of two, "
            "so every kernel tiling rounds them alike) and multiplied with the values as "
            "stored, on FP8 tensor cores (Triton; the torch reference rounds them the same "
            "way), so no value tile is widened. Off by default: bench/fp8_quality.py "
            "--kv-fp8-probabilities measures its recall cost first"
        ),
    )
    max_rows: int = field(
        default=1024, metadata=_help("rows (beams) decoding at once, summed over requests")
    )
    max_kv_slots: int | None = field(
        default=None,
        metadata=_help(
            f"KV cache size in tokens, all requests together (default {DEFAULT_KV_SLOTS}, or from "
            "kv_memory_fraction when that is given; this wins over it)"
        ),
    )
    kv_memory_fraction: float | None = field(
        default=None,
        metadata=_help(
            "CUDA only: size the KV cache to this fraction (0-1] of the GPU memory free after the "
            "weights load; leave room for activations, CUDA graphs and catalogs"
        ),
    )
    page_size: int = field(default=16, metadata=_help("KV slots per page (the allocation unit)"))
    max_model_len: int | None = field(
        default=None, metadata=_help("context length limit (default: the model's)")
    )
    max_prefill_tokens: int = field(
        default=8192,
        metadata=_help("prompt tokens prefilled in one step (one request may exceed it)"),
    )
    admission_ratio: float = field(
        default=0.0,
        metadata=_help(
            "batched admission: while requests of one width run, hold waiting ones of that "
            "width back until their rows reach this share of the running rows (0: admit at "
            "every step; mixed widths are never held), so arrivals a few ms apart share one "
            "prefill forward and decode in step"
        ),
    )
    admission_max_wait_steps: int = field(
        default=2,
        metadata=_help("engine steps batched admission holds a waiting request back at most"),
    )
    attention_backend: str = field(
        default="auto",
        metadata=_help(
            "auto | torch | triton | flashinfer (auto: Triton on CUDA, torch elsewhere)"
        ),
    )
    # False is the kill switch should the shared-suffix kernels misbehave on some shape.
    shared_suffix_attention: bool = field(
        default=True,
        metadata=_help(
            "Triton: generated tokens that several beams share are read once per ancestor "
            "group, not once per row (suffixes of 16 tokens and more)"
        ),
    )
    beam_expansion: BeamExpansion = field(
        default=BeamExpansion.STREAMED,
        metadata=_help(
            "streamed: beam candidates from hidden states in row chunks; dense: full log-prob "
            "rows for every beam (transformers' way, the reference)"
        ),
    )
    # Dense ranking keeps transformers' exact tie order for small requests.
    dense_expansion_limit: int = field(
        default=1 << 22,
        metadata=_help("requests with up to this many beam scores (k x vocab) rank them densely"),
    )
    batch_beam_steps: bool = field(
        default=True,
        metadata=_help(
            "streamed beam requests in lockstep (same width, step, parameters) advance as one"
        ),
    )
    # False is the kill switch for a graph bug: the same bucketed shapes run eagerly.
    cuda_graphs: bool = field(
        default=True,
        metadata=_help(
            "CUDA + Triton: replay decode steps from CUDA graphs of bucketed shapes "
            "(false: the same shapes, eagerly)"
        ),
    )
    prefill_graphs: bool = field(
        default=True,
        metadata=_help(
            "CUDA + Triton: prefill batches of up to max_prefill_graph_tokens tokens at "
            "bucketed token counts, replayed from CUDA graphs when cuda_graphs (false: "
            "eagerly, unbucketed)"
        ),
    )
    # Small prefill batches are bound by the host's kernel launches, large ones by their
    # kernels; an eager batch still costs the engine thread its launches, which bound the
    # host-bound rates (W3 at n = 50, FP8 at long contexts: docs/benchmarks.md). One graph
    # per TOKEN_STEP tokens up to here is captured at start-up.
    max_prefill_graph_tokens: int = field(
        default=8192,
        metadata=_help("the largest prefill batch (prompt tokens) replayed from a CUDA graph"),
    )
    # Off until an A/B on the GPU shows it pays (bench/prefill_graph_limit.py --split): the
    # split trades one eager forward's launches for several replays of smaller batches.
    prefill_graph_split: bool = field(
        default=False,
        metadata=_help(
            "a prefill batch past max_prefill_graph_tokens whose prompts each fit one runs as "
            "consecutive graph-sized batches, each replayed from its CUDA graph (false: one "
            "eager forward)"
        ),
    )
    # On: a graph captured while serving holds up every running request for the capture.
    # The price is start-up time; captures while serving are counted either way
    # (widebeam_decoder_graph_captures_total). Only the decoder server warms up
    # (`Engine.warm_up`); an engine built in-process captures as it meets its shapes.
    capture_at_start: bool = field(
        default=True,
        metadata=_help(
            "with CUDA graphs: capture every decode row bucket up to max_capture_rows and every "
            "prefill token bucket before reporting ready (false: capture lazily, while serving)"
        ),
    )
    max_capture_rows: int | None = field(
        default=None,
        metadata=_help(
            "largest decode batch (rows) captured at start-up (default: max_rows); larger "
            "buckets are captured when first met"
        ),
    )
    capture_beam_widths: tuple[int, ...] = field(
        default=(),
        metadata=_help(
            "with capture_at_start: beam widths (n = beam, as Recommend asks) whose beam steps "
            "are captured for every lockstep batch bucket of up to 32 such requests (a larger "
            "cohort runs as batches of 32; Recommend's shape and the chat routes'), besides the "
            "widths of the row buckets "
            "(comma-separated; e.g. 50,512,1000)"
        ),
    )
    overlap_scheduling: bool = field(
        default=True,
        metadata=_help(
            "prepare each decode step on the host while the device finishes the previous one"
        ),
    )
    admit_before_flags: bool = field(
        default=True,
        metadata=_help(
            "with overlap_scheduling: a waiting queue that fits whole in the free rows and "
            "pages is admitted, and its prefill queued, before the previous step's stop flags "
            "are read, so the device prefills while the host reads them and builds answers; "
            "requests arriving meanwhile wait for the next step instead of joining that "
            "prefill (same answers either way)"
        ),
    )
    intake_after_flags: bool = field(
        default=False,
        metadata=_help(
            "with admit_before_flags: a step that admitted a queue before the flags takes in "
            "and admits the requests that arrived while it read them too (a second prefill in "
            "that step) instead of leaving them for the next step; a closed loop's next "
            "requests, sent as answers leave, arrive then (same answers either way)"
        ),
    )
    answers_after_launch: bool = field(
        default=True,
        metadata=_help(
            "with overlap_scheduling: the answers of the requests a step's flags finish are "
            "built after that step's forwards are queued, not before (returned at the step's "
            "end; a server that sends answers early gets them right after the step's decode "
            "is launched), so the device computes while the host builds them"
        ),
    )
    prefix_cache: bool = field(
        default=True,
        metadata=_help(
            "reuse the KV of cached page-aligned prompt prefixes (unheld ones are evicted, least "
            "recently used first, when admission needs their pages); false: every prompt is "
            "prefilled whole"
        ),
    )
    catalog_path: str | None = field(
        default=None,
        metadata=_help(
            f"catalog file for constrained decoding, served as {DEFAULT_CATALOG!r}: any format "
            "the catalog service takes (JSONL, CSV, Parquet, FlashRec, sid2pid; gzip ok)"
        ),
    )
    sid_layout: str | None = field(
        default=None,
        metadata=_help("BASE:SIZE,...[;begin=ID;end=ID] (default: from the tokenizer)"),
    )

    def __post_init__(self) -> None:
        # Plain strings (callers, settings) become the enums, so the values are always members.
        enums = (
            ("dtype", DType),
            ("beam_expansion", BeamExpansion),
            ("quantization", Quantization),
            ("fp8_accumulation", Fp8Accumulation),
            ("head_quantization", Quantization),
            ("kv_dtype", KVDType),
        )
        for name, enum in enums:
            value = getattr(self, name)
            try:
                object.__setattr__(self, name, enum(value))
            except ValueError:
                raise ValueError(f"{name} must be one of {_values(enum)}, got {value!r}") from None
        if (
            self.quantization == Quantization.FP8
            and is_cuda_device(self.device)
            and self.dtype != DType.BFLOAT16
        ):
            raise ValueError(
                f"quantization fp8 on CUDA needs dtype bfloat16 (torch._scaled_mm's row-wise "
                f"scaling writes bf16), got {self.dtype}"
            )
        if self.head_quantization == Quantization.FP8 and self.quantization != Quantization.FP8:
            raise ValueError(
                "head_quantization fp8 needs quantization fp8 (the LM head is served on the "
                f"decoder layers' FP8 GEMM), got quantization {self.quantization.value!r}"
            )
        if self.kv_dtype == KVDType.FP8 and self.attention_backend == "flashinfer":
            raise ValueError(
                "kv_dtype fp8 needs attention_backend auto, triton or torch: FlashInfer's kernels "
                "take one K and one V scale per layer, the FP8 cache has one per KV head"
            )
        if self.kv_fp8_queries and self.kv_dtype != KVDType.FP8:
            raise ValueError(
                f"kv_fp8_queries needs kv_dtype fp8 (it multiplies FP8 queries with the FP8 "
                f"cache's keys), got kv_dtype {self.kv_dtype.value!r}"
            )
        if self.kv_fp8_probabilities and self.kv_dtype != KVDType.FP8:
            raise ValueError(
                f"kv_fp8_probabilities needs kv_dtype fp8 (it multiplies FP8 probabilities with "
                f"the FP8 cache's values), got kv_dtype {self.kv_dtype.value!r}"
            )
        widths = self.capture_beam_widths
        if isinstance(widths, str):
            try:
                widths = tuple(int(w) for w in widths.split(",") if w.strip())
            except ValueError:
                raise ValueError(
                    f"capture_beam_widths must be comma-separated integers, got {widths!r}"
                ) from None
        object.__setattr__(self, "capture_beam_widths", tuple(sorted(set(widths))))
        for width in self.capture_beam_widths:
            if not 1 <= width <= self.max_rows:
                raise ValueError(
                    f"capture_beam_widths: {width} is not a beam width of 1..max_rows "
                    f"({self.max_rows})"
                )
        if self.dense_expansion_limit < 0:
            raise ValueError("dense_expansion_limit must be >= 0")
        if not 0 <= self.admission_ratio < float("inf"):  # (NaN fails too)
            raise ValueError("admission_ratio must be a finite number >= 0")
        if self.admission_max_wait_steps < 0:
            raise ValueError("admission_max_wait_steps must be >= 0")
        for name in (
            "max_rows", "max_kv_slots", "page_size", "max_prefill_tokens", "max_capture_rows",
            "max_prefill_graph_tokens",
        ):  # fmt: skip
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be positive")
        if self.max_kv_slots is not None and self.max_kv_slots < self.page_size:
            raise ValueError("max_kv_slots must hold at least one page")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ValueError("max_model_len must be >= 2")
        if self.kv_memory_fraction is not None:
            if not 0 < self.kv_memory_fraction <= 1:
                raise ValueError("kv_memory_fraction must be in (0, 1]")
            if not is_cuda_device(self.device):
                raise ValueError(
                    f"kv_memory_fraction sizes the KV cache from free CUDA memory; device "
                    f"{self.device!r} has none to measure: give max_kv_slots instead"
                )
