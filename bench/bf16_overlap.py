"""Correctness on the GPU: for a Qwen3-0.6B-shape model at k = 10, the bf16 engine's beams vs
the fp32 engine's on the same weights — the overlap of the two sets of returned sequences.

    python bench/bf16_overlap.py [--prompts 20]
"""

from __future__ import annotations

import argparse
import gc
import random

import torch
from harness import environment, make_engine, markdown_table, model_dir, write_json

from widebeam.services.decoder.config import DType
from widebeam.services.decoder.requests.spec import GenerationRequest

K = 10


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--prompts", type=int, default=20)
    args = parser.parse_args()
    path = model_dir("qwen3-0.6b")
    rng = random.Random(1)
    prompts = [
        tuple(rng.randrange(1000, 100000) for _ in range(rng.randint(16, 128)))
        for _ in range(args.prompts)
    ]
    rows, results = [], []
    for tokens in (3, 16):
        reqs = [
            GenerationRequest(f"p{i}", p, beam_width=K, n=K, max_new_tokens=tokens, ignore_eos=True)
            for i, p in enumerate(prompts)
        ]
        outs = {}
        for dtype in (DType.FLOAT32, DType.BFLOAT16):
            engine = make_engine(path, max_rows=K * len(prompts), max_kv_slots=200_000, dtype=dtype)
            outs[dtype] = engine.generate(reqs)
            del engine
            gc.unfreeze()  # make_engine froze the heap: the old engine must become collectable
            gc.collect()
            torch.cuda.empty_cache()
        overlaps = []
        for a, b in zip(outs[DType.FLOAT32], outs[DType.BFLOAT16], strict=True):
            seqs_a = {tuple(x.output_ids) for x in a.beams}
            seqs_b = {tuple(x.output_ids) for x in b.beams}
            overlaps.append(len(seqs_a & seqs_b))
        mean = sum(overlaps) / len(overlaps)
        results.append(
            {
                "max_new_tokens": tokens,
                "k": K,
                "mean_overlap": mean,
                "min_overlap": min(overlaps),
                "per_prompt": overlaps,
            }
        )
        rows.append([tokens, K, f"{mean:.2f}/{K}", f"{min(overlaps)}/{K}", len(prompts)])
    env = environment()
    write_json("bf16_overlap", {"env": env, "rows": results})
    print(f"\nbf16 vs fp32 engine, Qwen3-0.6B shape, k = {K}, {env}")
    print(markdown_table(["tokens", "k", "mean overlap", "min overlap", "prompts"], rows))


if __name__ == "__main__":
    main()
