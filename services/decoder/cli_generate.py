"""`widebeam generate`: JSONL requests in, JSONL results out (in input order), batched together."""

from __future__ import annotations

import argparse
import json
import sys
from typing import IO, Any

from widebeam.services.decoder.config import DEFAULT_KV_SLOTS, DType, EngineConfig
from widebeam.services.decoder.precision_args import add_precision_arguments
from widebeam.services.decoder.requests.parsing import request_from_dict
from widebeam.services.decoder.requests.results import RequestOutput
from widebeam.services.decoder.requests.spec import GenerationRequest, RequestError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="HF model directory")
    parser.add_argument(
        "--catalog",
        help="catalog file for constrained requests (any format `widebeam catalog upload` takes)",
    )
    parser.add_argument("--sid-layout", help="BASE:SIZE,... (default: from the tokenizer)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--dtype", default=DType.FLOAT32, choices=[d.value for d in DType])
    add_precision_arguments(parser, "--dtype")
    parser.add_argument("--input", default="-", help="JSONL file of requests, or - for stdin")
    parser.add_argument("--output", default="-", help="JSONL output file, or - for stdout")
    parser.add_argument("--max-rows", type=int, default=EngineConfig.max_rows)
    parser.add_argument(
        "--max-kv-slots", type=int, help=f"KV cache size in tokens (default {DEFAULT_KV_SLOTS})"
    )


def output_to_dict(out: RequestOutput) -> dict[str, Any]:
    if out.error is not None:
        return {"id": out.request_id, "error": out.error}
    beams = []
    for beam in out.beams:
        entry: dict[str, Any] = {
            "output_ids": beam.output_ids,
            "score": beam.score,
            "cum_logprob": beam.cum_logprob,
            "finish_reason": beam.finish_reason,
        }
        if beam.item_ids is not None:
            entry["item_ids"] = beam.item_ids
        if beam.logprobs is not None:
            entry["logprobs"] = beam.logprobs
        beams.append(entry)
    result: dict[str, Any] = {"id": out.request_id, "beams": beams}
    if out.catalog_version is not None:
        result["catalog_version"] = out.catalog_version
    return result


def _read_requests(stream: IO[str]) -> list[GenerationRequest | RequestOutput]:
    parsed: list[GenerationRequest | RequestOutput] = []
    for number, line in enumerate(stream, start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except ValueError as exc:  # JSONDecodeError, and ints over the digit limit
            parsed.append(RequestOutput(None, error=f"line {number}: invalid JSON: {exc}"))
            continue
        try:
            parsed.append(request_from_dict(data))
        except RequestError as exc:
            rid = data.get("id") if isinstance(data, dict) else None
            parsed.append(RequestOutput(rid, error=f"line {number}: {exc}"))
    return parsed


def run(args: argparse.Namespace) -> int:
    config = EngineConfig(
        model_dir=args.model,
        device=args.device,
        dtype=args.dtype,
        quantization=args.quantization,
        fp8_accumulation=args.fp8_accumulation,
        head_quantization=args.head_quantization,
        kv_dtype=args.kv_dtype,
        kv_fp8_queries=args.kv_fp8_queries,
        kv_fp8_probabilities=args.kv_fp8_probabilities,
        catalog_path=args.catalog,
        sid_layout=args.sid_layout,
        max_rows=args.max_rows,
        max_kv_slots=args.max_kv_slots,
    )
    with _open_in(args.input) as stream:
        parsed = _read_requests(stream)
    from widebeam.services.decoder.engine import Engine  # torch: only when generating

    engine = Engine(config)
    requests = [p for p in parsed if isinstance(p, GenerationRequest)]
    results = iter(engine.generate(requests))
    with _open_out(args.output) as out:
        for item in parsed:
            result = next(results) if isinstance(item, GenerationRequest) else item
            out.write(json.dumps(output_to_dict(result)) + "\n")
    return 0


def _open_in(path: str) -> IO[str]:
    return open(sys.stdin.fileno(), closefd=False) if path == "-" else open(path)


def _open_out(path: str) -> IO[str]:
    return open(sys.stdout.fileno(), "w", closefd=False) if path == "-" else open(path, "w")
