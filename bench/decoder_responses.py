"""The decoder's host cost of building a wide Generate answer (`generate_response`), the part
of a reply built on the thread the engine shares the GIL with. CPU only, no model.

    python bench/decoder_responses.py [--beams 1000] [--repeat 2000]
    # the code of another checkout (a `git worktree` of the baseline), for a before/after:
    cd bench && python with_tree.py /tmp/before decoder_responses.py
"""

from __future__ import annotations

import argparse
import random
import time

from widebeam.services.decoder.requests.results import BeamResult, RequestOutput
from widebeam.services.decoder.server.convert import generate_response


def wide_output(beams: int, seed: int = 0) -> RequestOutput:
    """A constrained answer's shape: 4 tokens (3 SID codes and EOS) and one item per beam."""
    rng = random.Random(seed)
    results = []
    for i in range(beams):
        tokens = [151_000 + rng.randrange(8192) for _ in range(4)]
        score, cum = -rng.random(), -4 * rng.random()
        results.append(BeamResult(tokens, score, cum, "stop", None, [f"item-{i}"]))
    return RequestOutput("bench", results, catalog_version="v1", prompt_tokens=305)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--beams", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=2000)
    args = parser.parse_args()
    out = wide_output(args.beams)
    started = time.perf_counter()
    for _ in range(args.repeat):
        generate_response("bench", "default", out)
    per_call = (time.perf_counter() - started) / args.repeat * 1000
    print(f"generate_response, {args.beams} beams: {per_call:.3f} ms a call")


if __name__ == "__main__":
    main()
