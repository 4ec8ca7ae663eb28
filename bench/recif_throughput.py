"""Workload 4 — the RecIF-Bench shape (OpenOneRec's video task, FlashRec's public table):
OneRec-1.7B shape (Qwen3-1.7B with a 3 x 8192-code SID vocabulary) with random weights, a random
1.52M-SID catalog, prompts of ~1,500 text tokens + 190 SID items ([begin] a b c [end] each, then
the final begin: 2,451 tokens, p50 of the real prompts ~2,465), n = beam_width in
{50, 128, 512, 1000} at concurrency 32 / 16 / 8 / 4, 3 SID tokens + the end token: saturated
req/s, p50 / p99, the FLOP floor and the linear-graph floor (as W3), the illegal-SID count.

Variants: `distinct` (every prompt its own), `shared` (every prompt starts with the same
1,000-token instruction) with the prompt-prefix cache on and `shared-nocache` with it off — the
same requests, so their beams must agree (checked, and reported).

    python bench/recif_throughput.py [--quick] [--variants distinct,shared,shared-nocache]
    python bench/recif_throughput.py --smoke     # CPU, tiny model (tests/bench)
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from cache_dir import add_cache_argument
from catalogs import random_catalog
from floor import linear_step_ms, request_flops
from harness import (
    QWEN_VOCAB,
    add_engine_args,
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
from tracing import recorded

from widebeam.services.catalog.sid_layout import SidLayout
from widebeam.services.decoder.kv.prefix_cache import PrefixCacheStats
from widebeam.services.decoder.model.transformer import CausalLM
from widebeam.services.decoder.requests.results import RequestOutput
from widebeam.services.decoder.requests.spec import GenerationRequest
from widebeam.services.decoder.testing.tiny_model import write_tiny_model

# FlashRec on an RTX 5090 in FP8, OpenOneRec RecIF video (its README's table), QPS by n
PUBLIC_RPS = {50: 28.08, 128: 19.91, 512: 8.18, 1000: 4.62}
VARIANTS = ("distinct", "shared", "shared-nocache")


@dataclass(frozen=True)
class Shape:
    levels: tuple[int, ...]
    catalog_sids: int
    text_tokens: int  # per prompt, before its SID items
    shared_tokens: int  # of those, the instruction every `shared` prompt starts with
    history_items: int
    widths: dict[int, tuple[int, int]]  # n: (requests, concurrency)
    max_kv_slots: int
    max_rows: int


FULL_WIDTHS = {50: (256, 32), 128: (128, 16), 512: (48, 8), 1000: (24, 4)}
FULL = Shape((8192, 8192, 8192), 1_520_000, 1500, 1000, 190, FULL_WIDTHS, 220_000, 16384)
SMOKE = Shape((16, 16, 16), 400, 40, 32, 4, {4: (4, 2), 8: (4, 2)}, 8192, 256)


def _beam_overlap(on: dict[str, list], off: dict[str, list]) -> float:
    """The mean share of each request's beams (output ids) that both runs returned: bf16
    rounding of a GEMM can depend on its row count, so near-tied beams can trade places."""
    shares = []
    for key, beams in on.items():
        mine = {tuple(ids) for ids, _ in beams}
        theirs = {tuple(ids) for ids, _ in off[key]}
        shares.append(len(mine & theirs) / max(len(mine), 1))
    return sum(shares) / max(len(shares), 1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="a quarter of the requests")
    parser.add_argument("--smoke", action="store_true", help="CPU, tiny model, tiny widths")
    add_cache_argument(parser)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    add_engine_args(parser)
    add_run_args(parser, profile=True, host_clock=True)
    args = parser.parse_args()
    variants = args.variants.split(",")
    if unknown := set(variants) - set(VARIANTS):
        raise SystemExit(f"unknown variants {sorted(unknown)}; choose from {VARIANTS}")
    shape = SMOKE if args.smoke else FULL
    if args.smoke:
        path = Path(args.cache) / "recif-smoke-model"
        if not (path / "config.json").exists():
            write_tiny_model(path, seed=0, sid_levels=shape.levels)
        model, dtype, device, text_vocab = None, "float32", "cpu", 100
    else:
        path = model_dir("qwen3-1.7b", sid_levels=shape.levels)
        quant = load_options(args) if hasattr(args, "quantization") else {}
        model = CausalLM.from_pretrained(path, dtype=torch.bfloat16, device="cuda", **quant)
        dtype, device, text_vocab = "bfloat16", "cuda", QWEN_VOCAB - 3
    catalog = random_catalog(shape.catalog_sids, shape.levels)
    sids = [tuple(json.loads(line)["sid"]) for line in catalog.open()]
    # Built before make_engine freezes the heap: a 1.52M-entry set the collector still tracked
    # would be walked by every pass of its generation (100+ ms each, inside the timed phases).
    valid = frozenset(sids)
    options = engine_options(args)
    cache = options.pop("prefix_cache")  # the variants below decide it, within --no-prefix-cache
    if args.smoke:
        options = {k: v for k, v in options.items() if k != "quantization"}
    peak = None if args.smoke else matmul_tflops()
    results, rows = [], []
    answers: dict[str, dict[str, list]] = {}
    for variant in variants:
        engine = make_engine(
            path, shape.max_rows, shape.max_kv_slots, model=model, dtype=dtype,
            catalog_path=str(catalog), **options,
            prefix_cache=cache and variant != "shared-nocache",
        )  # fmt: skip
        model = engine.model  # shared by the next variants' engines
        prompts = w4_prompts(engine.sid_layout, shape, sids, text_vocab, variant != "distinct")
        for width, (num, conc) in shape.widths.items():
            num = max(2 * conc, num // 4) if args.quick else num
            label = f"{variant}, n={width}, c={conc}"
            profiles = (
                profile_timed(args, width, min(shape.widths)),
                profile_after(args, width, min(shape.widths)),
            )
            record = functools.partial(
                recorded, engine, f"w4_{variant}_n{width}{args.tag}", num, args
            )
            row, beams = _measure(
                engine, prompts, variant, width, num, conc, shape, valid, peak, profiles, label,
                record,
            )  # fmt: skip
            answers.setdefault(variant, {}).update(beams)
            print(row, flush=True)
            results.append(row)
            rows.append(_cells(row))
        del engine
        gc.unfreeze()  # make_engine froze the heap: the engine must become collectable
        gc.collect()
        if device == "cuda":
            torch.cuda.empty_cache()
    agree, score_diff, beam_overlap = None, None, None
    if "shared" in answers and "shared-nocache" in answers:
        on, off = answers["shared"], answers["shared-nocache"]
        agree = {k: [ids for ids, _ in v] for k, v in on.items()} == {
            k: [ids for ids, _ in v] for k, v in off.items()
        }
        beam_overlap = _beam_overlap(on, off)
        if agree:  # scores: rounding apart (a hit prefills fewer rows through each GEMM)
            pairs = [(a, b) for k in on for (_, a), (_, b) in zip(on[k], off[k], strict=True)]
            score_diff = max((abs(a - b) for a, b in pairs), default=0.0)
    env = environment() | {"matmul_tflops": peak, "quick": args.quick, "smoke": args.smoke}
    report = {
        "env": env | options,
        "rows": results,
        "shared_cache_on_equals_off": agree,
        "shared_cache_max_score_diff": score_diff,
        "shared_cache_beam_overlap": beam_overlap,
    }
    write_json("recif_throughput" + args.tag, report)
    print(f"\nWorkload 4 (RecIF shape: {shape.catalog_sids} SIDs, {shape.text_tokens} text tokens"
          f" + {shape.history_items} items per prompt), {env}")  # fmt: skip
    print(markdown_table(HEADERS, rows))
    if agree is not None:
        print(f"shared prefix, cache on vs off: beams {'identical' if agree else 'DIFFER'}, "
              f"scores within {score_diff}; beams shared {beam_overlap:.4f}")  # fmt: skip


HEADERS = [
    "variant", "n = beam", "c", "req/s", "p50 ms", "p99 ms", "alone ms", "FlashRec RTX5090 FP8",
    "floor req/s", "linear-graph req/s", "of floor", "prefix hit", "illegal SIDs",
]  # fmt: skip


def _cells(row: dict) -> list[object]:
    floor = row["floor_rps"]
    of_floor = "-" if floor is None else f"{100 * row['throughput_rps'] / floor:.1f}%"
    return [
        row["variant"], row["width"], row["concurrency"], row["throughput_rps"], row["p50_ms"],
        row["p99_ms"], row["alone_ms"], PUBLIC_RPS.get(row["width"], "-"),
        "-" if floor is None else floor, row["linear_graph_rps"] or "-", of_floor,
        f"{100 * row['prefix_hit_ratio']:.0f}%", f"{row['illegal_sids']}/{row['beams_checked']}",
    ]  # fmt: skip


def w4_prompts(
    layout: SidLayout, shape: Shape, sids: list, text_vocab: int, shared: bool
) -> Callable[[int], tuple[int, ...]]:
    """A prompt maker, one prompt per integer key (negative ones too): `shape.text_tokens`
    random text tokens (the first `shared_tokens` the same for every prompt when `shared`), then
    the SID items, then the begin token."""
    bases = [lv.base for lv in layout.levels]
    begin, end = layout.begin_token_id, layout.end_token_id
    rng = random.Random(0)
    instruction = [rng.randrange(text_vocab) for _ in range(shape.shared_tokens)]

    def prompt(seed: int) -> tuple[int, ...]:
        # random.Random seeds with |seed|: the rehearsal's negative keys would replay the timed
        # phase's prompts (and hit the prefix cache), so they get keys of their own.
        own = random.Random(seed if seed >= 0 else (1 << 62) - seed)
        head = instruction if shared else [own.randrange(text_vocab) for _ in instruction]
        ids = head + [own.randrange(text_vocab) for _ in range(shape.text_tokens - len(head))]
        for sid in own.sample(sids, shape.history_items):
            ids += [begin, *(b + c for b, c in zip(bases, sid, strict=True)), end]
        return (*ids, begin)

    return prompt


def _hit_ratio(before: PrefixCacheStats, after: PrefixCacheStats) -> float:
    """The share of the prompt tokens looked up between two KV stats that the prefix cache
    held."""
    looked_up = after.prompt_tokens - before.prompt_tokens
    return (after.hit_tokens - before.hit_tokens) / looked_up if looked_up else 0.0


def _measure(
    engine, prompts, variant, width, num, conc, shape, valid, peak, profiles, label, record
):  # fmt: skip
    layout = engine.sid_layout
    bases = [lv.base for lv in layout.levels]
    end = layout.end_token_id
    illegal = [0, 0]
    beams: dict[str, list] = {}

    def check(out: RequestOutput) -> None:
        beams[out.request_id] = [(b.output_ids, b.score) for b in out.beams]
        for beam in out.beams:
            codes = tuple(t - b for t, b in zip(beam.output_ids[:3], bases, strict=True))
            illegal[0] += codes not in valid or beam.output_ids[3:] != [end]
            illegal[1] += 1

    def make(i: int) -> GenerationRequest:
        return GenerationRequest(
            f"w4-{width}-{i}", prompts(1000 * width + i), beam_width=width, n=width,
            max_new_tokens=4, eos_token_id=(), constrained=True,
        )  # fmt: skip

    drive(engine, [make(-1)], None, 1)
    rehearse(engine, make, num, conc)
    alone = drive(engine, [make(-2)], None, 1).summary()["mean_ms"]
    kv = engine.scheduler.kv
    before = kv.stats()
    timed_profile, second_profile = profiles  # where --profile / --profile-apart put one
    with maybe_profile(timed_profile, label), record():
        stats = drive(engine, [make(i) for i in range(num)], None, conc, check).summary()
    after = kv.stats()
    profiled_hit = None
    if second_profile:
        # Prompts the timed pass did not send: the prefix cache holds no more of them than of
        # the timed pass's (what the variant shares, the instruction).
        with second_pass_profile(label):
            drive(engine, [make(num + i) for i in range(max(conc, num // 2))], None, conc)
        profiled_hit = _hit_ratio(after, kv.stats())
    prompt_len = len(prompts(0))
    hit = _hit_ratio(before, after)
    floor_rps = graph_rps = None
    if peak is not None:
        model = engine.model
        floor_rps = peak * 1e12 / request_flops(model.config, prompt_len, width, 4)
        # `conc` requests advance together: per round their prompts' linear layers (the LM
        # head only at each prompt's last token, so one column stands in for it) and 3
        # decode steps over conc x width rows.
        one = torch.zeros(1, dtype=torch.int64, device="cuda")
        round_ms = (
            linear_step_ms(model, conc * prompt_len, one)
            + linear_step_ms(model, conc)
            + 3 * linear_step_ms(model, conc * width)
        )
        graph_rps = conc / (round_ms / 1000)
    row = {
        "variant": variant, "width": width, "requests": num, "concurrency": conc,
        "prompt_tokens": prompt_len, "shared_tokens": shape.shared_tokens if variant != "distinct"
        else 0, **stats, "alone_ms": alone, "floor_rps": floor_rps, "linear_graph_rps": graph_rps,
        "prefix_hit_ratio": hit, "profiled_pass_prefix_hit_ratio": profiled_hit,
        "illegal_sids": illegal[0], "beams_checked": illegal[1],
        "public_flashrec_rps": PUBLIC_RPS.get(width),
    }  # fmt: skip
    return row, beams


if __name__ == "__main__":
    main()
