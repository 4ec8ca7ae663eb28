"""Where an eager decode step spends its time: torch profiler over one request of a workload,
top operators by device time (run on the GPU machine)."""

from __future__ import annotations

import argparse
import random

from harness import add_engine_args, engine_options, make_engine, model_dir
from torch.profiler import ProfilerActivity, profile

from widebeam.services.decoder.requests.spec import GenerationRequest


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--beams", type=int, default=5000)
    parser.add_argument("--tokens", type=int, default=3)
    parser.add_argument("--shape", default="qwen3-0.6b")
    add_engine_args(parser)
    args = parser.parse_args()
    path = model_dir(args.shape)
    engine = make_engine(
        path,
        max_rows=args.beams,
        max_kv_slots=64 + args.beams * args.tokens,
        **engine_options(args),
    )
    rng = random.Random(0)
    prompt = tuple(rng.randrange(1000, 100000) for _ in range(64))

    def req(i: int) -> GenerationRequest:
        return GenerationRequest(
            f"p{i}",
            prompt,
            beam_width=args.beams,
            n=args.beams,
            max_new_tokens=args.tokens,
            ignore_eos=True,
        )

    engine.generate([req(0)])
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        engine.generate([req(1)])
    print(
        prof.key_averages().table(sort_by="cuda_time_total", row_limit=25, max_name_column_width=60)
    )


if __name__ == "__main__":
    main()
