"""`widebeam loadgen`: drive a running gateway and report what it answered.

    widebeam loadgen --url http://127.0.0.1:8000 --items-file catalog.jsonl \\
        --concurrency 16 --factor 2 --duration 60 --json report.json

measures capacity with 16 closed-loop clients, then sends `/v1/recommend` open loop at twice
that rate for 60 s. `--mixed` interleaves completions and chat; `--mode closed` keeps the
closed loop (e.g. `--requests 10000 --watch-pid DECODER_PID` for a memory check)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from widebeam.loadgen.outcomes import PhaseSummary
from widebeam.loadgen.runner import LoadConfig, LoadReport, run_sync
from widebeam.loadgen.traffic import TrafficSpec


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--url", required=True, help="gateway base URL, http://HOST:PORT")
    add("--items", help="catalog item ids for histories, comma-separated")
    add("--items-file", help="catalog JSONL (item_id per line) or one item id per line")
    add("--mode", choices=["overload", "closed"], default="overload")
    add("--beam-widths", default="8", help="recommend beam widths, cycled (e.g. 1,2,16,64,256)")
    add("--mixed", action="store_true", help="interleave completions and chat (beam, sampled)")
    add("--concurrency", type=int, default=32, help="closed-loop clients")
    add("--capacity-seconds", type=float, default=5.0, help="capacity measurement length")
    add("--factor", type=float, default=2.0, help="open-loop rate = factor x capacity")
    add("--rate", type=float, help="open-loop rate (requests/s) instead of factor x capacity")
    add("--duration", type=float, default=60.0, help="main phase length in seconds")
    add("--requests", type=int, help="closed mode: stop after this many requests")
    add("--warmup", type=int, default=20, help="requests before measuring")
    add("--timeout", type=float, default=60.0, help="client-side limit per request (s)")
    add("--ready-timeout", type=float, default=30.0, help="wait for /readyz 200 this long (s)")
    add("--api-key", help="Bearer key of the gateway")
    add("--watch-pid", type=int, help="report this process's RSS at main-phase start and end")
    add("--seed", type=int, default=0)
    add("--json", help="write the full report here")
    parser.set_defaults(handler=run)


def read_items(args: argparse.Namespace) -> list[str]:
    items = [i.strip() for i in (args.items or "").split(",") if i.strip()]
    if args.items_file:
        for line in Path(args.items_file).read_text().splitlines():
            line = line.strip()
            if line.startswith("{"):
                items.append(str(json.loads(line)["item_id"]))
            elif line:
                items.append(line)
    if not items:
        raise ValueError("give catalog item ids with --items or --items-file")
    return list(dict.fromkeys(items))


def config_from_args(args: argparse.Namespace) -> LoadConfig:
    beams = tuple(int(b) for b in args.beam_widths.split(",") if b.strip())
    if not beams or min(beams) < 1:
        raise ValueError("--beam-widths needs positive integers")
    traffic = TrafficSpec(read_items(args), beams, mixed=args.mixed, seed=args.seed)
    return LoadConfig(
        url=args.url.rstrip("/"), traffic=traffic, mode=args.mode, concurrency=args.concurrency,
        capacity_s=args.capacity_seconds, factor=args.factor, rate=args.rate,
        duration_s=args.duration, requests=args.requests, warmup_requests=args.warmup,
        timeout_s=args.timeout, api_key=args.api_key, watch_pid=args.watch_pid,
        ready_timeout_s=args.ready_timeout,
    )  # fmt: skip


def describe(phase: PhaseSummary) -> str:
    a, s = phase.admitted_latency, phase.shed_latency
    target = f" (target {phase.target_rate}/s)" if phase.target_rate else ""
    return (
        f"{phase.name}: {phase.sent} sent in {phase.duration_s} s = {phase.offered_rate}/s"
        f"{target}; by status {phase.by_status}; 200/s {phase.throughput}; "
        f"admitted p50/p99/max {a.p50_ms}/{a.p99_ms}/{a.max_ms} ms; shed {phase.shed} "
        f"({phase.shed_with_retry_after} with Retry-After, p99 {s.p99_ms} ms); "
        f"5xx {phase.server_errors}; wrong {phase.wrong} {phase.problems or ''}"
    )


def print_report(report: LoadReport) -> None:
    for phase in report.phases:
        print(describe(phase))
    if report.capacity is not None:
        print(f"capacity: {report.capacity} requests/s")
    if report.rss_start_bytes is not None and report.rss_end_bytes is not None:
        start, end = report.rss_start_bytes >> 20, report.rss_end_bytes >> 20
        print(f"RSS of {report.config['watch_pid']}: {start} MiB -> {end} MiB over "
              f"{report.main_requests} requests")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    report = run_sync(config_from_args(args))
    print_report(report)
    if args.json:
        Path(args.json).write_text(report.to_json())
    main = report.phases[-1]
    return 1 if main.server_errors or main.wrong else 0
