"""Torch operator calls the engine thread makes per request, by engine phase, outside the
model's forwards and the beam expansions (each of those counts as one: on a GPU they replay
captured graphs).

On a GPU every operator call costs the engine thread host time (a dispatch, and for a non-view
operator a kernel launch, with the interpreter lock released and taken again around it), on a
thread whose host time is on the critical path at small widths (docs/benchmarks.md). The count
does not depend on the machine, so a host-path change can be checked on the CPU for the calls
it adds. An in-process engine on the tiny SID model (the expansions through `ExpansionGraphs`
without capture, as the GPU path runs them) serves a closed loop of `--concurrency` constrained
beam requests (beam = n = `--width`, 300-token prompts), each answer followed by a new request
that the next step admits; the phases are the engine's own `annotate` names. (Prefill and
decode preparation differ on the GPU: there the attention metadata is the Triton backend's,
here the torch reference's.)

    python bench/step_ops.py [--width 50] [--concurrency 12] [--requests 120] [--top 12]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import random
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from harness import environment, markdown_table, write_json
from step_host import build_engine
from torch.utils._python_dispatch import TorchDispatchMode

from widebeam.services.decoder.requests.spec import GenerationRequest
from widebeam.services.decoder.runner.expansion_graphs import ExpansionGraphs

FORWARD, EXPANSION, OUTSIDE = "(model forward)", "(beam expansion)", "(outside a step)"
PROMPT = 300


class OpCounter(TorchDispatchMode):
    """Counts operator calls by the phase open when they are made, views apart; nothing while
    `paused` (inside a forward or an expansion, counted once each by the caller)."""

    def __init__(self) -> None:
        super().__init__()
        self.phases = [OUTSIDE]
        self.paused = 0
        self.calls: collections.Counter[tuple[str, bool]] = collections.Counter()  # (phase, view)
        self.ops: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if not self.paused:
            phase = self.phases[-1]
            self.calls[phase, func.is_view] += 1
            self.ops[phase][str(func)] += 1
        return func(*args, **(kwargs or {}))

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        self.phases.append(name)
        try:
            yield
        finally:
            self.phases.pop()

    def counted_once(self, name: str, method: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            self.calls[name, False] += 1
            self.paused += 1
            try:
                return method(*args, **kwargs)
            finally:
                self.paused -= 1

        return wrapper


def serve(engine: Any, counter: OpCounter | None, width: int, concurrency: int, total: int,
          rng: random.Random, tag: str) -> None:  # fmt: skip
    """A closed loop of `total` requests, `concurrency` in flight, counted by `counter`."""
    begin = engine.sid_layout.begin_token_id
    sent = 0

    def submit() -> None:
        nonlocal sent
        prompt = (*(rng.randrange(200) for _ in range(PROMPT - 1)), begin)
        engine.submit(
            GenerationRequest(
                f"{tag}-{sent}", prompt, beam_width=width, n=width, max_new_tokens=4,
                constrained=True, normalization="sid",
            )
        )  # fmt: skip
        sent += 1

    for _ in range(min(concurrency, total)):
        submit()
    with counter if counter is not None else contextlib.nullcontext():
        answered = 0
        while engine.has_unfinished():
            for out in engine.step():
                if out.error is not None:
                    raise SystemExit(f"request {out.request_id} failed: {out.error}")
                answered += 1
                if sent < total:
                    submit()
    assert answered == total, (answered, total)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--width", type=int, default=50, help="beam width (= n)")
    parser.add_argument("--concurrency", type=int, default=12)
    parser.add_argument("--requests", type=int, default=120, help="counted requests")
    parser.add_argument("--top", type=int, default=12, help="operators listed per phase")
    parser.add_argument("--smoke", action="store_true", help="a few small requests")
    args = parser.parse_args()
    if args.smoke:
        args.width, args.concurrency, args.requests = 4, 2, 6
    if min(args.width, args.concurrency, args.requests) < 1:
        parser.error("--width, --concurrency and --requests must be >= 1")
    torch.set_num_threads(1)
    counter = OpCounter()
    with tempfile.TemporaryDirectory() as tmp:
        engine = build_engine(Path(tmp), "cpu")
        model_config = engine.model.config
        expander = ExpansionGraphs(
            engine.runner.raw_logits, model_config.vocab_size, model_config.hidden_size,
            engine.model.lm_head_weight.dtype, engine.device, use_graphs=False,
        )  # fmt: skip
        engine.step_policy = dataclasses.replace(engine.step_policy, expander=expander)
        engine.annotate = counter.phase
        # Instance attributes: only this engine's model and expander are counted once.
        engine.model.forward = counter.counted_once(FORWARD, engine.model.forward)
        expander._expand = counter.counted_once(EXPANSION, expander._expand)
        rng = random.Random(0)
        serve(engine, None, args.width, args.concurrency, 2 * args.concurrency, rng, "warm")
        serve(engine, counter, args.width, args.concurrency, args.requests, rng, "timed")
    phases = sorted({phase for phase, _ in counter.calls})
    per_request = {
        phase: {
            "calls": (counter.calls[phase, False] + counter.calls[phase, True]) / args.requests,
            "views": counter.calls[phase, True] / args.requests,
            "top": {op: n / args.requests for op, n in counter.ops[phase].most_common(args.top)},
        }
        for phase in phases
    }
    rows = [
        [phase, f"{entry['calls']:.1f}", f"{entry['views']:.1f}"]
        for phase, entry in sorted(per_request.items(), key=lambda kv: -kv[1]["calls"])
    ]
    outside_graphs = [
        entry["calls"] for phase, entry in per_request.items() if phase not in (FORWARD, EXPANSION)
    ]
    print(f"width {args.width}, concurrency {args.concurrency}, {args.requests} requests: "
          f"operator calls per request ({sum(outside_graphs):.1f} outside forwards and "
          "expansions)")  # fmt: skip
    print(markdown_table(["phase", "calls / request", "of them views"], rows))
    for phase, entry in per_request.items():
        if entry["top"]:
            tops = ", ".join(f"{op} {n:.1f}" for op, n in entry["top"].items())
            print(f"{phase}: {tops}")
    write_json("step_ops", {"env": environment(), "args": vars(args), "per_request": per_request})


if __name__ == "__main__":
    main()
