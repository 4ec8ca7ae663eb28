"""Workload 3 at one width, several timed rounds in one process: how far one tree's throughput
spreads from process to process, so a before/after difference can be told from that spread.

    python bench/w3_repeat.py [--width 50] [--concurrency 64] [--requests 128] [--rounds 3]

Another tree's engine: `python with_tree.py DIR w3_repeat.py ...` (this bench, that tree's
`widebeam`).
"""

from __future__ import annotations

import argparse

from catalogs import random_catalog
from harness import drive, make_engine, model_dir, rehearse
from w3_prompts import HistoryPrompts, catalog_sids

from widebeam.services.decoder.requests.spec import GenerationRequest

LEVELS = (512, 512, 512)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--width", type=int, default=50)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--requests", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    catalog = random_catalog(430_000, LEVELS)
    engine = make_engine(
        model_dir("qwen3-1.7b", sid_levels=LEVELS),
        max_rows=16384,
        max_kv_slots=120_000,
        catalog_path=str(catalog),
    )
    assert engine.sid_layout is not None
    prompt = HistoryPrompts(engine.sid_layout, catalog_sids(catalog))
    width, conc = args.width, args.concurrency

    def make(i: int) -> GenerationRequest:
        return GenerationRequest(
            f"w3-{i}", prompt(), beam_width=width, n=width, max_new_tokens=4, eos_token_id=(),
            constrained=True,
        )  # fmt: skip

    drive(engine, [make(-1)], None, 1)
    rehearse(engine, make, args.requests, conc)  # a round's batch shapes, captured untimed
    rates = []
    for r in range(args.rounds):
        batch = [make(1000 * (r + 1) + i) for i in range(args.requests)]
        rates.append(drive(engine, batch, None, conc).summary()["throughput_rps"])
    per_round = " ".join(f"{x:.1f}" for x in rates)
    print(f"n = {width}, concurrency {conc}: req/s per round {per_round}")


if __name__ == "__main__":
    main()
