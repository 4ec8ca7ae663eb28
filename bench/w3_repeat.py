"""Workload 3 at one width, several timed rounds in one process: how far one tree's throughput
spreads from process to process, so a before/after difference can be told from that spread.

    python bench/w3_repeat.py [--width 50] [--concurrency 64] [--requests 128] [--rounds 3]

To time another tree with this script, put that tree's packages first on PYTHONPATH (a folder
holding its `widebeam/` with `services` and `kernels` linked in) and pass `--bench DIR` (its
bench/ folder, whose harness builds the engine).
"""

from __future__ import annotations

import argparse
import json
import random
import sys


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--width", type=int, default=50)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--requests", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bench", help="another tree's bench/ folder (its harness)")
    args = parser.parse_args()
    if args.bench:
        sys.path.insert(0, args.bench)
    from catalogs import random_catalog
    from harness import drive, make_engine, model_dir

    try:
        from widebeam.services.decoder.requests.spec import GenerationRequest
    except ImportError:  # trees from before the decoder's requests/ package
        from widebeam.services.decoder.request import GenerationRequest  # type: ignore

    levels = (512, 512, 512)
    catalog = random_catalog(430_000, levels)
    sids = [tuple(json.loads(line)["sid"]) for line in catalog.open()]
    engine = make_engine(
        model_dir("qwen3-1.7b", sid_levels=levels),
        max_rows=16384,
        max_kv_slots=120_000,
        catalog_path=str(catalog),
    )
    layout = engine.sid_layout
    assert layout is not None
    bases = [level.base for level in layout.levels]
    begin, end = layout.begin_token_id, layout.end_token_id
    rng = random.Random(0)
    width, conc = args.width, args.concurrency

    def make(i: int) -> GenerationRequest:
        ids: list[int] = []
        for sid in rng.sample(sids, 60):
            ids += [begin, *(b + c for b, c in zip(bases, sid, strict=True)), end]
        return GenerationRequest(
            f"w3-{i}", (*ids, begin), beam_width=width, n=width, max_new_tokens=4,
            eos_token_id=(), constrained=True,
        )  # fmt: skip

    drive(engine, [make(-1)], None, 1)
    for wave in range(2):  # the batch shapes of full concurrency get captured first
        drive(engine, [make(-10 - wave * conc - i) for i in range(conc)], None, conc)
    rates = []
    for r in range(args.rounds):
        batch = [make(1000 * (r + 1) + i) for i in range(args.requests)]
        rates.append(drive(engine, batch, None, conc).summary()["throughput_rps"])
    per_round = " ".join(f"{x:.1f}" for x in rates)
    print(f"n = {width}, concurrency {conc}: req/s per round {per_round}")


if __name__ == "__main__":
    main()
