"""Workload 3 — generative-rec throughput: Qwen3-1.7B shape with a SID-extended vocabulary
(3 levels x 512 codes + begin/end), 430k catalog SIDs, ~300-token prompts of SID histories,
n = beam_width in {50, 512, 1000}, 3 SID tokens + the end token: saturated throughput, p50/p99
latency, and the illegal-SID rate.

    python bench/genrec_throughput.py [--quick] [--hf]
"""

from __future__ import annotations

import argparse
import gc

import torch
from catalogs import dict_trie, prefix_fn, random_catalog
from floor import linear_step_ms, request_flops
from harness import (
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
    rehearse,
    second_pass_profile,
    write_json,
)
from hf_baseline import hf_beam_ms, load_hf
from tracing import recorded
from w3_prompts import HistoryPrompts, catalog_sids

from widebeam.services.decoder.model.transformer import CausalLM
from widebeam.services.decoder.requests.results import RequestOutput
from widebeam.services.decoder.requests.spec import GenerationRequest, Normalization

LEVELS = (512, 512, 512)
WIDTHS = {50: (200, 64), 512: (48, 12), 1000: (24, 8)}  # width: (requests, concurrency)
PUBLIC_RPS = {50: 219.5, 512: 47.0, 1000: 24.6}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--hf", action="store_true", help="transformers at n = 50")
    add_engine_args(parser)
    add_normalization_arg(parser)
    add_run_args(parser, profile=True, host_clock=True)
    args = parser.parse_args()
    path = model_dir("qwen3-1.7b", sid_levels=LEVELS)
    catalog = random_catalog(430_000, LEVELS)
    sids = catalog_sids(catalog)
    valid = set(sids)
    model = CausalLM.from_pretrained(
        path, dtype=torch.bfloat16, device="cuda", **load_options(args)
    )
    engine = make_engine(
        path,
        max_rows=16384,
        max_kv_slots=120_000,
        model=model,
        catalog_path=str(catalog),
        **engine_options(args),
    )
    layout = engine.sid_layout
    # The floors count the LM head the requests run: the SID columns only with "sid" (the
    # requests have no EOS, so the columns are the layout's tokens).
    columns = engine.constraint.sid_columns(()) if args.normalization == Normalization.SID else None
    head_columns = None if columns is None else columns.numel()
    bases = [lv.base for lv in layout.levels]
    end = layout.end_token_id
    prompt = HistoryPrompts(layout, sids)

    illegal = [0, 0]

    def check(out: RequestOutput) -> None:
        for beam in out.beams:
            codes = tuple(t - b for t, b in zip(beam.output_ids[:3], bases, strict=True))
            illegal[0] += codes not in valid or beam.output_ids[3:] != [end]
            illegal[1] += 1

    hf_ms = None
    peak = matmul_tflops()
    results, rows = [], []
    for width, (num, conc) in WIDTHS.items():
        num = max(2 * conc, num // 4) if args.quick else num
        make = lambda i, w=width: GenerationRequest(  # noqa: E731
            f"w3-{w}-{i}",
            prompt(),
            beam_width=w,
            n=w,
            max_new_tokens=4,
            eos_token_id=(),
            constrained=True,
            normalization=args.normalization,
        )
        drive(engine, [make(-1)], None, 1)
        rehearse(engine, make, num, conc)
        alone = drive(engine, [make(-2)], None, 1).summary()["mean_ms"]
        label = f"n={width}, c={conc}"
        with (
            maybe_profile(profile_timed(args, width, min(WIDTHS)), label),
            recorded(engine, f"w3_n{width}{args.tag}", num, args),
        ):
            stats = drive(engine, [make(i) for i in range(num)], None, conc, check).summary()
        if profile_after(args, width, min(WIDTHS)):
            with second_pass_profile(label):
                drive(engine, [make(num + i) for i in range(num // 2)], None, conc)
        flops = request_flops(model.config, 301, width, 4, head_columns)
        floor_rps = peak * 1e12 / flops
        # Practical floor: `conc` requests advance together; per round, their prompts' linear
        # layers once and 3 decode steps over conc x width rows (cuBLAS at these shapes).
        round_ms = linear_step_ms(model, conc * 301, columns) + 3 * linear_step_ms(
            model, conc * width, columns
        )
        graph_rps = conc / (round_ms / 1000)
        row = {
            "width": width,
            "requests": num,
            "concurrency": conc,
            **stats,
            "alone_ms": alone,
            "floor_rps": floor_rps,
            "linear_graph_rps": graph_rps,
            "illegal_sids": illegal[0],
            "beams_checked": illegal[1],
            "public_rtx5090_rps": PUBLIC_RPS[width],
        }
        print(row, flush=True)
        results.append(row)
        rows.append(
            [
                width,
                stats["throughput_rps"],
                stats["p50_ms"],
                stats["p99_ms"],
                alone,
                PUBLIC_RPS[width],
                floor_rps,
                graph_rps,
                f"{100 * stats['throughput_rps'] / floor_rps:.1f}%",
                f"{illegal[0]}/{illegal[1]}",
            ]
        )
    if args.hf:
        del engine
        gc.unfreeze()  # make_engine froze the heap: the old engine must become collectable
        gc.collect()  # the engine's CUDA graphs and runner form a reference cycle
        torch.cuda.empty_cache()
        hf_model = load_hf(path)
        p = prompt()
        fn = prefix_fn(dict_trie(catalog, bases, end), len(p), [0])
        hf_ms = hf_beam_ms(hf_model, list(p), 50, 4, fn)
        results.append({"hf_n50_ms": hf_ms, "speedup_vs_hf": hf_ms / results[0]["alone_ms"]})
        print(f"transformers n=50: {hf_ms:.0f} ms; ours alone {results[0]['alone_ms']:.1f} ms")
    env = environment() | {
        "matmul_tflops": peak,
        "quick": args.quick,
        "normalization": args.normalization,
    }
    write_json("genrec_throughput" + args.tag, {"env": env | engine_options(args), "rows": results})
    print(f"\nWorkload 3 (Qwen3-1.7B + SID vocab, 430k SIDs, ~301-token prompts), {env}")
    print(
        markdown_table(
            [
                "n = beam",
                "req/s",
                "p50 ms",
                "p99 ms",
                "alone ms",
                "public RTX5090 req/s",
                "floor req/s",
                "linear-graph req/s",
                "of floor",
                "illegal SIDs",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
