"""Workload 2 — SID decode with a long context: Qwen3-1.7B shape, beam 256, 3 constrained
decode steps, context 1000 and 5000 tokens: single-request latency, and online throughput at
concurrency 4.

    python bench/sid_decode.py [--quick] [--hf] [--contexts 5000] [--reps N] [--host-clock]
"""

from __future__ import annotations

import argparse
import random

import torch
from catalogs import dict_trie, prefix_fn, random_catalog
from floor import linear_step_ms, request_flops
from harness import (
    VERSUS_HEADERS,
    add_engine_args,
    add_normalization_arg,
    add_run_args,
    drive,
    engine_options,
    environment,
    load_options,
    make_engine,
    markdown_table,
    matmul_tflops,
    maybe_profile,
    model_dir,
    profile_after,
    profile_timed,
    second_pass_profile,
    versus_cells,
    write_json,
)
from hf_baseline import hf_beam_ms, load_hf
from tracing import recorded

from widebeam.services.decoder.model.transformer import CausalLM
from widebeam.services.decoder.requests.spec import GenerationRequest, Normalization

BEAMS, STEPS, CODEBOOK = 256, 3, 1024
BASES = [140000, 140000 + CODEBOOK, 140000 + 2 * CODEBOOK]
LAYOUT = ",".join(f"{b}:{CODEBOOK}" for b in BASES)
PUBLIC = {1000: 17.6, 5000: 42.3}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--hf", action="store_true", help="transformers at context 1000")
    parser.add_argument(
        "--contexts",
        type=lambda v: [int(c) for c in v.split(",")],
        default=[1000, 5000],
        help="comma-separated prompt lengths (of 1000, 5000)",
    )
    parser.add_argument("--reps", type=int, help="single requests a context (default 3 quick, 10)")
    add_engine_args(parser)
    add_normalization_arg(parser)
    add_run_args(parser, profile=True, host_clock=True)
    args = parser.parse_args()
    if unknown := set(args.contexts) - set(PUBLIC):
        parser.error(f"--contexts: {sorted(unknown)} not among {sorted(PUBLIC)}")
    path = model_dir("qwen3-1.7b")
    catalog = random_catalog(200_000, (CODEBOOK,) * 3)
    rng = random.Random(0)
    prompts = {ctx: [rng.randrange(1000, 100000) for _ in range(ctx)] for ctx in (1000, 5000)}
    hf_ms = None
    if args.hf:
        hf_model = load_hf(path)
        fn = prefix_fn(dict_trie(catalog, BASES, None), 1000, [0])
        hf_ms = hf_beam_ms(hf_model, prompts[1000], BEAMS, STEPS, fn)
        print(f"transformers, context 1000: {hf_ms:.0f} ms", flush=True)
        del hf_model
        torch.cuda.empty_cache()
    model = CausalLM.from_pretrained(
        path, dtype=torch.bfloat16, device="cuda", **load_options(args)
    )
    peak = matmul_tflops()
    engine = make_engine(
        path,
        max_rows=4 * BEAMS,
        max_kv_slots=4 * (5000 + BEAMS * STEPS) + 64,
        model=model,
        catalog_path=str(catalog),
        sid_layout=LAYOUT,
        **engine_options(args),
    )

    # The floors count the LM head the requests run: the SID columns only with "sid".
    columns = engine.constraint.sid_columns(()) if args.normalization == Normalization.SID else None
    head_columns = None if columns is None else columns.numel()

    def req(ctx: int, i: int) -> GenerationRequest:
        # Each request its own first token: a user's context is not the previous user's, so
        # the prompt-prefix cache finds nothing to reuse (its own bench is recif_throughput's).
        first = 1000 + (i * 7919) % 99000
        return GenerationRequest(
            f"w2-{ctx}-{i}",
            (first, *prompts[ctx][1:]),
            beam_width=BEAMS,
            n=BEAMS,
            max_new_tokens=STEPS,
            eos_token_id=(),
            constrained=True,
            normalization=args.normalization,
        )

    results, rows = [], []
    reps = args.reps or (3 if args.quick else 10)
    for ctx in args.contexts:
        drive(engine, [req(ctx, -1)], None, 1)
        for wave in range(3):  # c4's graphs captured, its kernels compiled
            drive(engine, [req(ctx, -10 - 8 * wave - i) for i in range(8)], None, 4)
        with (
            recorded(engine, f"w2_ctx{ctx}{args.tag}", reps, args),
            maybe_profile(profile_timed(args, ctx, 1000), f"context {ctx}, single"),
        ):
            single = drive(engine, [req(ctx, i) for i in range(reps)], None, 1).summary()
        online = drive(engine, [req(ctx, 100 + i) for i in range(4 * reps)], None, 4).summary()
        if profile_after(args, ctx, 1000):  # after online's ids too: no prompt met twice
            with second_pass_profile(f"context {ctx}, single"):
                first_id = 100 + 4 * reps
                drive(engine, [req(ctx, first_id + i) for i in range(max(2, reps // 2))], None, 1)
        flops = request_flops(model.config, ctx, BEAMS, STEPS, head_columns)
        floor_ms = flops / (peak * 1e12) * 1000
        graph_ms = linear_step_ms(model, BEAMS, columns) * (STEPS - 1)
        hf = hf_ms if ctx == 1000 else None
        row = {
            "context": ctx,
            "single_mean_ms": single["mean_ms"],
            "single_p50_ms": single["p50_ms"],
            "online_rps_c4": online["throughput_rps"],
            "online_p50_ms": online["p50_ms"],
            "floor_ms": floor_ms,
            "linear_graph_ms": graph_ms,
            "hf_ms": hf,
            "public_h100_ms": PUBLIC[ctx],
        }
        print(row, flush=True)
        results.append(row)
        rows.append(
            [
                ctx,
                single["mean_ms"],
                single["p50_ms"],
                online["throughput_rps"],
                PUBLIC[ctx],
                *versus_cells(single["mean_ms"], hf, floor_ms, graph_ms),
            ]
        )
    env = environment() | {
        "matmul_tflops": peak,
        "quick": args.quick,
        "normalization": args.normalization,
    }
    write_json("sid_decode" + args.tag, {"env": env | engine_options(args), "rows": results})
    print(f"\nWorkload 2 (Qwen3-1.7B shape, beam {BEAMS}, {STEPS} constrained steps), {env}")
    print(
        markdown_table(
            [
                "context",
                "single mean ms",
                "single p50 ms",
                "req/s @c4",
                "public H100 ms",
                *VERSUS_HEADERS,
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
