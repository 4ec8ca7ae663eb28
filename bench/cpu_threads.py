"""A CPU decoder's torch thread count, on recommend-shaped work: constrained beam requests
(width 32) built from the demo's held-out histories, sent to the engine one at a time (as one
client of `widebeam up` does) and then all together. Set the threads from outside, e.g.

    farm-bench -n 5 --vs "env OMP_NUM_THREADS=2 .venv/bin/python bench/cpu_threads.py" \\
        -- env OMP_NUM_THREADS=1 .venv/bin/python bench/cpu_threads.py

Reads `widebeam demo build --tiny`'s artifacts (`make demo DEMO_TINY=1` writes them)."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from widebeam.services.catalog.sid_layout import SidLayout
from widebeam.services.decoder.config import EngineConfig
from widebeam.services.decoder.engine import Engine
from widebeam.services.decoder.requests.spec import GenerationRequest
from widebeam.services.decoder.server.prompting import history_prompt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--demo", type=Path, default=Path(".cache/demo-tiny"))
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--beam-width", type=int, default=32)
    args = parser.parse_args()
    catalog = args.demo / "catalog.jsonl"
    with catalog.open() as fh:
        sids = {row["item_id"]: tuple(row["sid"]) for row in map(json.loads, fh)}
    with (args.demo / "histories.jsonl").open() as fh:
        users = [json.loads(line) for line in fh][: args.requests]
    layout = SidLayout.from_tokenizer(args.demo / "model")
    if layout is None:
        raise SystemExit(f"{args.demo / 'model'} has no SID tokens")
    engine = Engine(EngineConfig(model_dir=str(args.demo / "model"), catalog_path=str(catalog)))
    steps = layout.path_length(include_begin=False)

    def request(name: str, history: list[str]) -> GenerationRequest:
        prompt = history_prompt(layout, [sids[item] for item in history if item in sids])
        return GenerationRequest(
            name,
            tuple(prompt),
            beam_width=args.beam_width,
            n=10,
            max_new_tokens=steps,
            eos_token_id=(),  # as the Recommend RPC: a full SID path ends the beam
            constrained=True,
        )

    def run(requests: list[GenerationRequest]) -> None:
        for one in requests:
            engine.submit(one)
        while engine.has_unfinished():
            engine.step()

    started = time.perf_counter()
    for i, user in enumerate(users):
        run([request(f"one-{i}", user["history"])])
    alone = time.perf_counter() - started
    run([request(f"all-{i}", user["history"]) for i, user in enumerate(users)])
    together = time.perf_counter() - started - alone
    print(
        f"torch threads {torch.get_num_threads()}: {len(users)} requests one at a time "
        f"{alone * 1000 / len(users):.1f} ms each; all together {together:.2f} s"
    )


if __name__ == "__main__":
    main()
