"""Engines that differ only in how they run long prefill batches, timed in alternation in one
process: `max_prefill_graph_tokens`, and with `+split` `prefill_graph_split` (a batch past the
limit runs as consecutive graph-sized batches instead of one eager forward).

At n = 50 the engine thread's host time bounds the rate, and a prefill batch past the graph
limit (twelve 301-token prompts: 3,612 tokens, over the default 2,048) is launched eagerly, some
400 kernel launches from Python. Each engine runs workload 3's closed loop (60-item histories,
new ones every phase) in turn, the order swapped every round, with the host probe before each
phase: the host's speed flips by up to 2x from second to second on the lent machine, so only
alternation and medians compare two settings fairly.

    python prefill_graph_limit.py [--limits 2048,4096,2048+split] [--width 50] [--concurrency 12]
                                  [--rounds 6] [--requests 240] [--smoke]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import NamedTuple

import torch
from cache_dir import bench_cache
from catalogs import random_catalog
from harness import drive, environment, make_engine, markdown_table, model_dir
from harness import write_json as write_result
from host_probe import probe_ms
from w3_prompts import HistoryPrompts, catalog_sids

from widebeam.services.catalog.sid_layout import SidLayout
from widebeam.services.decoder.engine import Engine
from widebeam.services.decoder.requests.spec import GenerationRequest
from widebeam.services.decoder.runner.capture_counts import CapturePhase
from widebeam.services.decoder.testing.tiny_model import write_tiny_model

W3_LEVELS = (512, 512, 512)
SMOKE_LEVELS = (16, 16, 16)
SPLIT = "+split"


class Variant(NamedTuple):
    label: str  # as given: "2048", "2048+split"
    limit: int  # max_prefill_graph_tokens
    split: bool  # prefill_graph_split


def parse_variants(text: str) -> list[Variant]:
    """`LIMIT[+split],...`; ValueError naming what is wrong."""
    variants = []
    for label in (part.strip() for part in text.split(",") if part.strip()):
        number = label.removesuffix(SPLIT)
        if not number.isdigit() or int(number) <= 0:
            raise ValueError(f"{label!r} is not a positive token count, optionally +split")
        variants.append(Variant(label, int(number), label.endswith(SPLIT)))
    if not variants or len({v.label for v in variants}) != len(variants):
        raise ValueError("name at least one variant, each once")
    return variants


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--limits",
        default="2048,4096",
        help="each engine's max_prefill_graph_tokens, +split for prefill_graph_split "
        "(comma-separated, e.g. 2048,2048+split)",
    )
    parser.add_argument("--width", type=int, default=50, help="beam = n")
    parser.add_argument("--concurrency", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--requests", type=int, default=240, help="timed requests per phase")
    parser.add_argument("--smoke", action="store_true", help="CPU: a tiny model, a few requests")
    args = parser.parse_args()  # fmt: skip
    try:
        variants = parse_variants(args.limits)
    except ValueError as err:
        parser.error(f"--limits must be LIMIT[+split],...: {err}")
    if args.rounds < 1 or args.requests < 1 or args.concurrency < 1:
        parser.error("--rounds, --requests and --concurrency must be >= 1")
    if args.smoke:
        args.width, args.concurrency, args.rounds, args.requests = 4, 2, 2, 4
        torch.set_num_threads(1)
        cache = bench_cache()
        root = cache / "prefill-limit-smoke-model"
        if not (root / "config.json").exists():
            write_tiny_model(root, seed=0, sid_levels=SMOKE_LEVELS)
        model, catalog, rows, slots = root, random_catalog(400, SMOKE_LEVELS), 64, 16384
    else:
        model = model_dir("qwen3-1.7b", sid_levels=W3_LEVELS)
        catalog, rows, slots = random_catalog(430_000, W3_LEVELS), 16384, 120_000
    layout = SidLayout.from_tokenizer(model)
    assert layout is not None, f"{model} has no SID tokens"
    # Before the engines: make_engine freezes the heap, the catalog's SID list with it (left to
    # the collector, every pass of its generation would walk its 430k entries).
    requests = RequestMaker(catalog, layout, args.width)
    engines = {v.label: start_engine(model, catalog, rows, slots, v, args.width) for v in variants}
    for engine in engines.values():  # every engine's shapes of full concurrency, once
        drive(engine, requests.batch("warm", 2 * args.concurrency), None, args.concurrency)
    phases = []
    for rnd in range(args.rounds):
        order = variants if rnd % 2 == 0 else variants[::-1]
        for variant in order:
            phases.append(timed_phase(engines[variant.label], variant, rnd, requests, args))
            print(phases[-1], flush=True)
    report(args, [v.label for v in variants], engines, phases)


def start_engine(
    model: Path, catalog: Path, rows: int, slots: int, variant: Variant, width: int
) -> Engine:
    engine = make_engine(
        model, rows, slots, catalog_path=str(catalog), capture_at_start=True,
        capture_beam_widths=(width,), max_prefill_graph_tokens=variant.limit,
        prefill_graph_split=variant.split,
    )  # fmt: skip
    engine.warm_up()
    engine.mark_ready()
    return engine


class RequestMaker:
    """Workload 3's requests: a prompt of 60 random catalog items' SIDs, then the begin token;
    every request a new history."""

    def __init__(self, catalog: Path, layout: SidLayout, width: int) -> None:
        self.prompt = HistoryPrompts(layout, catalog_sids(catalog))
        self.width = width
        self.made = 0
        self.steps = layout.path_length(include_begin=False)

    def batch(self, tag: str, count: int) -> list[GenerationRequest]:
        out = []
        for _ in range(count):
            self.made += 1
            out.append(GenerationRequest(
                f"{tag}-{self.made}", self.prompt(), beam_width=self.width, n=self.width,
                max_new_tokens=self.steps, eos_token_id=(), constrained=True,
            ))  # fmt: skip
        return out


def timed_phase(
    engine: Engine, variant: Variant, rnd: int, requests: RequestMaker, args: argparse.Namespace
) -> dict[str, object]:
    batch = requests.batch(f"{variant.label}-r{rnd}", args.requests)
    counts = engine.step_counts
    prefills, eager_before = counts.prefill_forwards, counts.eager_prefills
    split_before = counts.split_prefills
    probe = probe_ms()
    cpu = time.process_time()
    stats = drive(engine, batch, None, args.concurrency)
    n = len(stats.latencies_ms)
    summary = stats.summary()
    return {
        "variant": variant.label,
        "limit": variant.limit,
        "split": variant.split,
        "round": rnd,
        "answered_rps": n / stats.wall_s,
        "p50_ms": summary["p50_ms"],
        "p99_ms": summary["p99_ms"],
        "cpu_ms_per_request": (time.process_time() - cpu) * 1000 / max(n, 1),
        "prefills_per_request": (counts.prefill_forwards - prefills) / max(n, 1),
        "eager_prefills_per_request": (counts.eager_prefills - eager_before) / max(n, 1),
        "split_prefills_per_request": (counts.split_prefills - split_before) / max(n, 1),
        "host_probe_ms": probe,
    }


def report(
    args: argparse.Namespace, labels: list[str], engines: dict[str, Engine], phases: list[dict]
) -> None:
    medians = {
        label: statistics.median(p["answered_rps"] for p in phases if p["variant"] == label)
        for label in labels
    }
    base = labels[0]
    # each round's rate over the first variant's in the same round (adjacent phases)
    paired = {
        label: [
            p["answered_rps"] / q["answered_rps"]
            for p in phases if p["variant"] == label
            for q in phases if q["variant"] == base and q["round"] == p["round"]
        ]
        for label in labels[1:]
    }  # fmt: skip
    captures = {
        label: engine.runner.capture_counts.total(CapturePhase.SERVING)
        for label, engine in engines.items()
    }
    result = {
        "env": environment() | {"width": args.width, "concurrency": args.concurrency,
                                "requests": args.requests, "rounds": args.rounds},
        "phases": phases,
        "median_rps": medians,
        "paired_ratio_median": {k: statistics.median(v) for k, v in paired.items()},
        "captures_after_ready": captures,
    }  # fmt: skip
    write_result("prefill_graph_limit", result)
    print(markdown_table(
        ["variant", "round", "req/s", "p50 ms", "p99 ms", "CPU ms/req", "prefills/req",
         "eager prefills/req", "split batches/req", "host probe ms"],
        [[p["variant"], p["round"], p["answered_rps"], p["p50_ms"], p["p99_ms"],
          f"{p['cpu_ms_per_request']:.2f}", f"{p['prefills_per_request']:.3f}",
          f"{p['eager_prefills_per_request']:.3f}", f"{p['split_prefills_per_request']:.3f}",
          f"{p['host_probe_ms']:.2f}"]
         for p in phases],
    ))  # fmt: skip
    for label in labels:
        line = f"limit {label}: median {medians[label]:.1f} req/s"
        if label in paired:
            line += f", ÷ limit {base} per round (median) {statistics.median(paired[label]):.3f}"
        print(line + f"; captures after ready {captures[label]}")


if __name__ == "__main__":
    main()
