"""Where the host's time goes: cProfile over the engine loop of workload 2 (single requests) or
workload 3 (saturated), on the GPU machine. With CUDA the device runs asynchronously, so a
function's time is its host work plus any wait for the device (`resolve_flags`, copies).

    python host_profile.py w2 [--concurrency 4] [--contexts 1000]
    python host_profile.py w3 [--width 50] [--concurrency 64] [--requests 128]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import pstats
import random

import torch
from catalogs import random_catalog
from harness import GcTimer, drive, make_engine, model_dir, rehearse
from w3_prompts import HistoryPrompts, catalog_sids

from widebeam.services.decoder.engine import Engine
from widebeam.services.decoder.requests.spec import GenerationRequest

W2_CODEBOOK = 1024
W2_BASES = [140000, 140000 + W2_CODEBOOK, 140000 + 2 * W2_CODEBOOK]
W3_LEVELS = (512, 512, 512)


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def report(profiler: cProfile.Profile, title: str) -> None:
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(30)
    stats.sort_stats("cumulative").print_stats("widebeam|services|kernels", 45)
    print(f"==== {title}\n{out.getvalue()}", flush=True)


def profile_w2(concurrency: int, contexts: list[int], freeze: bool) -> None:
    catalog = random_catalog(200_000, (W2_CODEBOOK,) * 3)
    engine = make_engine(
        model_dir("qwen3-1.7b"),
        max_rows=1024,
        max_kv_slots=4 * (5000 + 768) + 64,
        catalog_path=str(catalog),
        sid_layout=",".join(f"{b}:{W2_CODEBOOK}" for b in W2_BASES),
    )
    rng = random.Random(0)
    for ctx in contexts:
        prompt = tuple(rng.randrange(1000, 100000) for _ in range(ctx))

        def make(i: int, ctx: int = ctx, prompt: tuple[int, ...] = prompt) -> GenerationRequest:
            return GenerationRequest(
                f"w2-{ctx}-{i}", prompt, beam_width=256, n=256, max_new_tokens=3,
                eos_token_id=(), constrained=True,
            )  # fmt: skip

        c = concurrency
        for i in range(3):  # warm-up: kernels compiled, graphs captured
            drive(engine, [make(-100 * i - j) for j in range(2 * c)], None, c)
        sync()
        if freeze:
            gc.freeze()
        timer = GcTimer()
        plain = drive(engine, [make(1000 + i) for i in range(5 * c)], None, c).summary()
        timer.stop()
        print(timer.summary())
        profiler = cProfile.Profile()
        profiler.enable()
        stats = drive(engine, [make(i) for i in range(5 * c)], None, c).summary()
        profiler.disable()
        print(
            f"context {ctx}, concurrency {c}: {plain['throughput_rps']:.1f} req/s, mean "
            f"{plain['mean_ms']:.1f} ms unprofiled; mean {stats['mean_ms']:.1f} ms profiled"
        )
        report(profiler, f"w2 context {ctx}, {5 * c} requests, {c} at a time")


def profile_w3(width: int, concurrency: int, requests: int) -> None:
    catalog = random_catalog(430_000, W3_LEVELS)
    path = model_dir("qwen3-1.7b", sid_levels=W3_LEVELS)
    engine: Engine = make_engine(
        path, max_rows=16384, max_kv_slots=120_000, catalog_path=str(catalog)
    )
    assert engine.sid_layout is not None
    prompt = HistoryPrompts(engine.sid_layout, catalog_sids(catalog))

    def make(i: int) -> GenerationRequest:
        return GenerationRequest(
            f"w3-{i}", prompt(), beam_width=width, n=width, max_new_tokens=4, eos_token_id=(),
            constrained=True,
        )  # fmt: skip

    drive(engine, [make(-1)], None, 1)
    rehearse(engine, make, requests, concurrency)
    sync()
    plain = drive(engine, [make(1000 + i) for i in range(requests)], None, concurrency).summary()
    profiler = cProfile.Profile()
    profiler.enable()
    profiled = drive(engine, [make(i) for i in range(requests)], None, concurrency).summary()
    profiler.disable()
    print(
        f"n = {width}, concurrency {concurrency}: {plain['throughput_rps']:.1f} req/s "
        f"unprofiled, {profiled['throughput_rps']:.1f} req/s profiled"
    )
    report(profiler, f"w3 n={width} c={concurrency}, {requests} requests")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("workload", choices=["w2", "w3"])
    parser.add_argument("--width", type=int, default=50)
    parser.add_argument("--concurrency", type=int, help="default: 1 (w2), 64 (w3)")
    parser.add_argument("--requests", type=int, default=128)
    parser.add_argument("--contexts", default="1000,5000", help="w2 prompt lengths")
    parser.add_argument("--freeze", action="store_true", help="gc.freeze() after the warm-up")
    args = parser.parse_args()
    if args.workload == "w2":
        contexts = [int(c) for c in args.contexts.split(",")]
        profile_w2(args.concurrency or 1, contexts, args.freeze)
    else:
        profile_w3(args.width, args.concurrency or 64, args.requests)


if __name__ == "__main__":
    main()
