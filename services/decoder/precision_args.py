"""The engine's precision options as every command line that builds an engine takes them
(`widebeam generate`, the benches): one definition of their names, choices and defaults."""

from __future__ import annotations

import argparse

from widebeam.services.decoder.config import Fp8Accumulation, KVDType, Quantization


def add_precision_arguments(parser: argparse.ArgumentParser, model_dtype_flag: str) -> None:
    """--quantization, --fp8-accumulation, --head-quantization, --kv-dtype,
    --kv-fp8-queries and --kv-fp8-probabilities;
    `model_dtype_flag` names the option (or setting) that gives the model's dtype, which
    `--kv-dtype auto` follows."""
    parser.add_argument(
        "--quantization",
        default=Quantization.NONE,
        choices=[q.value for q in Quantization],
        help="fp8: the decoder layers' linears in W8A8 FP8 (torch._scaled_mm; CUDA: with a "
        "bfloat16 model)",
    )
    parser.add_argument(
        "--fp8-accumulation",
        default=Fp8Accumulation.FAST,
        choices=[a.value for a in Fp8Accumulation],
        help="with --quantization fp8 on CUDA: fast (partial sums in the tensor cores' reduced "
        "precision, torch._scaled_mm's use_fast_accum) or precise (promoted to fp32); the CPU "
        "reference sums in fp32 either way",
    )
    parser.add_argument(
        "--head-quantization",
        default=Quantization.NONE,
        choices=[q.value for q in Quantization],
        help="fp8 (with --quantization fp8): the LM head's GEMM in W8A8 FP8 too",
    )
    parser.add_argument(
        "--kv-dtype",
        default=KVDType.AUTO,
        choices=[k.value for k in KVDType],
        help=f"fp8: the KV cache in float8_e4m3fn with per-head scales (auto: in "
        f"{model_dtype_flag})",
    )
    parser.add_argument(
        "--kv-fp8-queries",
        action="store_true",
        help="with --kv-dtype fp8: the prefill's scores and decode's over the prompt from "
        "queries rounded to FP8, on FP8 tensor cores (the engine's kv_fp8_queries)",
    )
    parser.add_argument(
        "--kv-fp8-probabilities",
        action="store_true",
        help="with --kv-dtype fp8: the prefill's attention probabilities and decode's over the "
        "prompt rounded to FP8, P V on FP8 tensor cores (the engine's kv_fp8_probabilities)",
    )
