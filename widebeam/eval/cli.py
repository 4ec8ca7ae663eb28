"""`widebeam eval`: offline recommendation quality of a running gateway.

    widebeam eval --url http://127.0.0.1:8000 --data .cache/demo/histories.jsonl --n 10 \\
        --beam-width 32 --concurrency 8 --json eval.json

prints a markdown table (hit / recall / NDCG / MRR at each K, invalid and duplicate rates, QPS,
latency percentiles) and writes the same as JSON. ``--data``: our JSONL of item histories
(`/v1/recommend`) or a RecIF-Bench parquet (`/v1/chat/completions`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from widebeam.eval.metrics import DEFAULT_KS

DEFAULT_N = 32


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--url", required=True, help="gateway base URL, http://HOST:PORT")
    add("--data", required=True, help="histories JSONL or RecIF-Bench parquet")
    add("--n", type=int, default=DEFAULT_N, help=f"predictions per sample (default {DEFAULT_N})")
    add("--beam-width", type=int, help="beams searched (default: n)")
    add("--k", help="cutoffs, comma-separated (default "
        + ",".join(map(str, DEFAULT_KS)) + "; those <= n are reported, and n)")  # fmt: skip
    add("--level", choices=["item", "sid"],
        help="match items or SIDs (default: item for JSONL, sid for RecIF)")  # fmt: skip
    add("--concurrency", type=int, default=8, help="requests in flight (default 8)")
    add("--catalog", help="catalog name (default: the gateway's default catalog)")
    add(
        "--exclude-history",
        action="store_true",
        help="recommend: never return history items (default: they may be the held-out one)",
    )
    add("--unconstrained", action="store_true", help="chat: decode without the catalog trie")
    add(
        "--max-tokens",
        type=int,
        default=5,
        help="chat: tokens per beam (default 5 = <|sid_begin|>, 3 codes, <|sid_end|>)",
    )
    add("--model", help="chat: model name to send (default: the first of GET /v1/models)")
    add("--chat-template-kwargs", help='chat: JSON object, e.g. {"enable_thinking": false}')
    add("--limit", type=int, help="evaluate only the first N samples")
    add("--warmup", type=int, default=0, help="unscored requests before measuring (default 0)")
    add("--timeout", type=float, default=120.0, help="seconds per request (default 120)")
    add("--retries", type=int, default=3, help="retries of a 429/503/dropped connection")
    add("--max-errors", type=int, default=10, help="stop after this many failed samples")
    add("--api-key", default=os.environ.get("WIDEBEAM_API_KEY"),
        help="Bearer key of the gateway [WIDEBEAM_API_KEY]")  # fmt: skip
    add("--json", help="write the report as JSON here")
    add("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from widebeam.eval.client import GatewayError
    from widebeam.eval.predictions import RequestSettings
    from widebeam.eval.report import build_report
    from widebeam.eval.runner import EvalAborted, RunSettings
    from widebeam.eval.runner import run as run_samples
    from widebeam.eval.samples import Level, load_samples

    n, beam_width = args.n, args.beam_width or args.n
    if not 1 <= n <= beam_width:
        raise ValueError(f"--n must be in 1..--beam-width ({beam_width}), got {n}")
    if args.concurrency < 1 or args.max_tokens < 1 or (args.limit is not None and args.limit < 1):
        raise ValueError("--concurrency, --max-tokens and --limit must be positive")
    ks = _ks(args.k)
    template_kwargs = _json_object(args.chat_template_kwargs, "--chat-template-kwargs")
    samples, level = load_samples(args.data, Level(args.level) if args.level else None, args.limit)
    request = RequestSettings(
        n=n, beam_width=beam_width, catalog=args.catalog, exclude_history=args.exclude_history,
        constrained=not args.unconstrained, max_tokens=args.max_tokens, model=args.model,
        chat_template_kwargs=template_kwargs,
    )  # fmt: skip
    settings = RunSettings(
        url=args.url, concurrency=args.concurrency, timeout_s=args.timeout, retries=args.retries,
        max_errors=args.max_errors, warmup=args.warmup, api_key=args.api_key,
        progress=not args.no_progress and sys.stderr.isatty(),
    )  # fmt: skip
    try:
        result = run_samples(samples, level, request, settings)
    except (EvalAborted, GatewayError) as exc:
        print(f"widebeam eval: {exc}", file=sys.stderr)
        return 1
    report = build_report(result, level, str(args.data), args.concurrency, ks)
    print(report.markdown())
    if args.json:
        Path(args.json).write_text(report.to_json())
    for error in report.first_errors:
        print(f"widebeam eval: failed: {error}", file=sys.stderr)
    return 1 if report.errors else 0


def _ks(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    try:
        ks = tuple(int(k) for k in text.split(",") if k.strip())
    except ValueError:
        raise ValueError(f"--k must be comma-separated integers, got {text!r}") from None
    if not ks or min(ks) < 1:
        raise ValueError(f"--k must be positive integers, got {text!r}")
    return ks


def _json_object(text: str | None, flag: str) -> dict[str, object] | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{flag} is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{flag} must be a JSON object, got {text!r}")
    return value
