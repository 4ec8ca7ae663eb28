"""Workload 1 — wide beam on a general LM: Qwen3-0.6B shape, beam_width = n = 5000,
unconstrained, max_new_tokens in {3, 16, 32, 64, 128}, with the public request pattern.

    python bench/wide_beam.py [--quick] [--hf-tokens 3,16]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
from pathlib import Path

import torch
from e2e import DecoderProcess, drive_grpc, generate_request
from floor import linear_step_ms, request_flops
from harness import (
    VERSUS_HEADERS,
    add_engine_args,
    add_run_args,
    drive,
    engine_options,
    environment,
    load_options,
    make_engine,
    markdown_table,
    matmul_tflops,
    model_dir,
    versus_cells,
    write_json,
)
from hf_baseline import hf_beam_ms, load_hf
from tracing import recorded

from widebeam.services.decoder.kv.kv_capacity import kv_slot_bytes, slots_in_budget
from widebeam.services.decoder.model.transformer import CausalLM
from widebeam.services.decoder.requests.spec import GenerationRequest

BEAMS = 5000
PROMPT_LEN = 64
# (max_new_tokens, num_requests, qps, concurrency) — the public general-engine pattern.
PATTERN = [(3, 23, 0.8, 4), (16, 10, 0.3, 2), (32, 8, 0.25, 2), (64, 6, 0.2, 2), (128, 4, 0.15, 2)]
QUICK_REQUESTS = {3: 6, 16: 3, 32: 2, 64: 2, 128: 2}
PUBLIC_MEAN_MS = {3: 244.6, 16: 927.7, 32: 1690.7, 64: 3511.0, 128: 8087.3}
KV_SLOTS = 800_000  # ~92 GB of bf16 KV for this shape
KV_FREE_FRACTION = 0.9  # of the memory free beside the weights: the step's workspaces need the rest
KV_PAGE = 1024  # slots rounded down to whole pages of any size the engine may use


def slots_that_fit(model: CausalLM) -> int:
    """The bf16 KV slots this GPU holds beside the loaded model (an H100 holds fewer than
    KV_SLOTS: 128 tokens' 640k slots for one request do not fit in its 80 GB)."""
    cfg = model.config
    torch.cuda.empty_cache()
    free, _ = torch.cuda.mem_get_info()
    slot = kv_slot_bytes(
        cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.head_dim, torch.bfloat16
    )
    return slots_in_budget(int(free * KV_FREE_FRACTION), slot, KV_PAGE)


def run_e2e(path: Path, prompt: list[int], wanted: set[int], quick: bool) -> list[dict]:
    """The same pattern through `widebeam decoder serve` (a subprocess) over gRPC."""
    server = DecoderProcess(path, 4 * BEAMS, None)  # KV sized to the GPU by the decoder
    try:
        server.wait_ready()
        assert server.info is not None
        held = server.info.limits.max_kv_slots
        rows = []
        for tokens, num, qps, conc in PATTERN:
            if tokens not in wanted:
                continue
            need = PROMPT_LEN + BEAMS * tokens
            if need > held:
                print(f"e2e {tokens} tokens: skipped, one request needs {need} KV slots and "
                      f"the decoder holds {held}", flush=True)  # fmt: skip
                continue
            num = QUICK_REQUESTS[tokens] if quick else num
            warm = [generate_request("warm", prompt, BEAMS, tokens, ignore_eos=True)]
            asyncio.run(drive_grpc(server.address, warm, None, 1))
            reqs = [
                generate_request(f"e2e-{tokens}-{i}", prompt, BEAMS, tokens, ignore_eos=True)
                for i in range(num)
            ]
            stats = asyncio.run(drive_grpc(server.address, reqs, qps, conc)).summary()
            stats["max_new_tokens"] = tokens
            print({"e2e_tokens": tokens, **stats}, flush=True)
            rows.append(stats)
        return rows
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--tokens", default="3,16,32,64,128")
    parser.add_argument("--hf-tokens", default="3")
    parser.add_argument("--e2e", action="store_true", help="also time through the decoder service")
    parser.add_argument("--e2e-only", action="store_true", help="only the decoder-service timing")
    add_engine_args(parser)
    add_run_args(parser, profile=False)
    args = parser.parse_args()
    wanted = {int(t) for t in args.tokens.split(",")}
    hf_tokens = {int(t) for t in args.hf_tokens.split(",") if t}
    path = model_dir("qwen3-0.6b")
    rng = random.Random(0)
    prompt = [rng.randrange(1000, 100000) for _ in range(PROMPT_LEN)]
    if args.e2e_only:
        rows = run_e2e(path, prompt, wanted, args.quick)
        write_json("wide_beam_e2e", {"env": environment() | {"quick": args.quick}, "rows": rows})
        print(
            markdown_table(
                ["tokens", "reqs", "e2e mean ms", "e2e p50 ms", "e2e p90 ms", "public mean ms"],
                [
                    [
                        r["max_new_tokens"],
                        r["n"],
                        r["mean_ms"],
                        r["p50_ms"],
                        r["p90_ms"],
                        PUBLIC_MEAN_MS[r["max_new_tokens"]],
                    ]
                    for r in rows
                ],
            )
        )
        return
    hf_ms: dict[int, float] = {}
    if hf_tokens:  # before our KV cache exists: transformers needs the memory for its own
        hf_model = load_hf(path)
        for tokens in sorted(hf_tokens & wanted):
            hf_ms[tokens] = hf_beam_ms(hf_model, prompt, BEAMS, tokens)
            print(f"transformers beam {BEAMS}, {tokens} tokens: {hf_ms[tokens]:.0f} ms", flush=True)
        del hf_model
        torch.cuda.empty_cache()
    model = CausalLM.from_pretrained(
        path, dtype=torch.bfloat16, device="cuda", **load_options(args)
    )
    cfg = model.config
    peak = matmul_tflops()
    results, rows = [], []
    for tokens, num, qps, conc in PATTERN:
        if tokens not in wanted:
            continue
        num = QUICK_REQUESTS[tokens] if args.quick else num
        need = PROMPT_LEN + BEAMS * tokens
        fit = slots_that_fit(model)
        if need > fit:
            print(f"{tokens} tokens: skipped, one request needs {need} KV slots and this GPU "
                  f"holds {fit}", flush=True)  # fmt: skip
            continue
        engine = make_engine(
            path,
            max_rows=conc * BEAMS,
            max_kv_slots=min(conc * need, KV_SLOTS, fit),
            model=model,
            **engine_options(args),
        )
        make = lambda i, t=tokens: GenerationRequest(  # noqa: E731
            f"w1-{t}-{i}",
            tuple(prompt),
            beam_width=BEAMS,
            n=BEAMS,
            max_new_tokens=t,
            ignore_eos=True,
        )
        drive(engine, [make(-1)], None, 1)  # warm-up, then the timed pattern's batch shapes
        drive(engine, [make(-10 - i) for i in range(min(conc, 4))], None, conc)
        with recorded(engine, f"w1_{tokens}tok{args.tag}", 1, args):
            alone = drive(engine, [make(-2)], None, 1).summary()["mean_ms"]
        stats = drive(engine, [make(i) for i in range(num)], qps, conc).summary()
        del engine
        gc.unfreeze()  # make_engine froze the heap: the old engine must become collectable
        gc.collect()  # the engine's CUDA graphs and runner form a reference cycle
        torch.cuda.empty_cache()
        flops = request_flops(cfg, PROMPT_LEN, BEAMS, tokens)
        floor_ms = flops / (peak * 1e12) * 1000
        practical_ms = linear_step_ms(model, BEAMS) * (tokens - 1)
        hf = hf_ms.get(tokens)
        row = {
            "max_new_tokens": tokens,
            "requests": num,
            "qps": qps,
            "concurrency": conc,
            **stats,
            "engine_alone_ms": alone,
            "floor_ms": floor_ms,
            "practical_floor_ms": practical_ms,
            "floor_fraction": floor_ms / alone,
            "hf_ms": hf,
            "speedup_vs_hf": hf / alone if hf else None,
            "public_mean_ms": PUBLIC_MEAN_MS[tokens],
        }
        print(row, flush=True)
        results.append(row)
        rows.append(
            [
                tokens,
                num,
                stats["mean_ms"],
                stats["p50_ms"],
                stats["p90_ms"],
                alone,
                PUBLIC_MEAN_MS[tokens],
                *versus_cells(alone, hf, floor_ms, practical_ms),
            ]
        )
    if args.e2e:
        del model
        torch.cuda.empty_cache()
        e2e_rows = {e2e["max_new_tokens"]: e2e for e2e in run_e2e(path, prompt, wanted, args.quick)}
        for row in results:
            if row["max_new_tokens"] in e2e_rows:
                row["e2e"] = e2e_rows[row["max_new_tokens"]]
        print(
            markdown_table(
                ["tokens", "reqs", "e2e mean ms", "e2e p50 ms", "e2e p90 ms", "public mean ms"],
                [
                    [
                        r["max_new_tokens"],
                        r["requests"],
                        r["e2e"]["mean_ms"],
                        r["e2e"]["p50_ms"],
                        r["e2e"]["p90_ms"],
                        r["public_mean_ms"],
                    ]
                    for r in results
                    if "e2e" in r
                ],
            )
        )
    env = environment() | {"matmul_tflops": peak, "prompt_len": PROMPT_LEN, "quick": args.quick}
    write_json("wide_beam" + args.tag, {"env": env | engine_options(args), "rows": results})
    print(f"\nWorkload 1 (Qwen3-0.6B shape, beam = n = {BEAMS}), {env}")
    print(
        markdown_table(
            [
                "tokens",
                "reqs",
                "mean ms",
                "p50 ms",
                "p90 ms",
                "alone ms",
                "public mean ms",
                *VERSUS_HEADERS,
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
