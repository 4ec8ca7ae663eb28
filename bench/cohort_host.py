"""Host (Python/CPU) time of a decode step's beam cohorts: grouping and `advance_cohorts`.

`bench/step_host.py` times `advance_cohorts` together with `stage_flags`; this one splits out
what the engine thread does per request and step to form the cohorts (`cohort_key` over every
running request), times `advance_cohorts` alone and a request's whole life of decode steps,
for `--requests` SID requests of `--beams` beams (= n) prefilled together (`shared`: one
cohort from one previous batch) or one by one (`mixed`: its states gathered). The requests and
engine are `step_host.py`'s (the tiny test model, 3 SID levels: a prompt step, then 3 decode
steps). The engine's own policy runs the prefill with an eager expansion; the timed calls then
get the outputs of each expansion computed once, as a CUDA graph's replay returns its static
outputs, so the figures are the host work around it. Medians in microseconds:

* `keys`: `cohort_key` over the cohort at a later decode step (each request's spec of that
  shape built at an earlier step, when the checkout keeps them);
* `keys_next`: the same at the first decode step (the requests as their prefill left them);
* `advance`: `advance_cohorts` at a later decode step;
* `life`: `advance_cohorts` at each of the requests' decode steps, in turn, from their prefill
  (the sum over their lives: what a step costs them on average, times 3).

`--profile N` prints cProfile's top N functions (own time) over `--repeats` calls of
`advance_cohorts` instead. Every run prints a digest of one real decode step per shape (the
expansion computed: parents, tokens, trie nodes, slot tables and the packed outputs): two
checkouts that print the same digest stepped identically.

    .venv/bin/python bench/cohort_host.py [--requests 12] [--beams 50] [--repeats 300]
    .venv/bin/python bench/cohort_host.py --root /tmp/before   # another checkout's code
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import hashlib
import pstats
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/ is not a package

from step_host import (
    SID_LEVELS,
    admitted_states,
    build_engine,
    fresh_copies,
    median_us,
    report,
    time_calls,
)


def replaying(expansion_graphs: type) -> type:
    """`ExpansionGraphs` that computes (`replay` False), or, with `replay` True, returns each
    bucket's outputs computed once as a graph replay returns its static ones (every repeat
    runs the same steps on the same inputs). One expander for both keeps one policy: the one
    a request's specs were built under at its prefill, as in the engine."""

    class Replaying(expansion_graphs):  # type: ignore[misc, valid-type]
        replay = False

        def _expand(self, spec: Any, entry: Any) -> Any:
            if not self.replay:
                return super()._expand(spec, entry)
            if not hasattr(self, "_static"):
                self._static: dict[int, Any] = {}
            if id(entry) not in self._static:
                self._static[id(entry)] = super()._expand(spec, entry)
            return self._static[id(entry)]

    return Replaying


def snapshot(states: list[Any]) -> list[Any]:
    """Copies a step can advance without touching `states`, their specs' memos included (one
    copy of a memo its requests share; a checkout that keeps none has nothing more to copy)."""
    copies = fresh_copies(states)
    memos: dict[int, Any] = {}
    for twin in copies:
        specs = getattr(twin, "cohort_specs", None)
        if specs is not None:
            if id(specs) not in memos:
                memos[id(specs)] = type(specs)(
                    specs.policy, specs.constraint, specs.streams, list(specs.specs)
                )
            twin.cohort_specs = memos[id(specs)]
    return copies


def digest_step(states: list[Any], hidden: Any, policy: Any) -> str:
    """One step of copies of `states` with `policy`; a digest of all it produced."""
    from widebeam.services.decoder.runner.beam_cohorts import advance_cohorts

    copies = snapshot(states)
    advance_cohorts(chunks_of(copies, hidden), policy)
    sha = hashlib.sha256()
    for state in copies:
        search = state.beam_search
        tensors = [state.suffix_table, state.pending_tokens, state.nodes]
        tensors += [*search._outputs.tensors(), search.done_flag]
        for tensor in tensors:
            sha.update(tensor.detach().to("cpu").contiguous().numpy().tobytes())
        sha.update(str((search.step, search._row)).encode())
    return sha.hexdigest()[:16]


def chunks_of(states: list[Any], hidden: Any) -> list[tuple[Any, Any]]:
    chunks, row = [], 0
    for state in states:
        chunks.append((state, hidden[row : row + state.num_rows]))
        row += state.num_rows
    return chunks


def bench(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from widebeam.services.decoder.runner.beam_cohorts import advance_cohorts, cohort_key
    from widebeam.services.decoder.runner.expansion_graphs import ExpansionGraphs

    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp, torch.inference_mode():
        engine = build_engine(Path(tmp), "cpu")
        runner = engine.runner
        mc = runner.model.config
        expander = replaying(ExpansionGraphs)(
            runner.raw_logits, mc.vocab_size, mc.hidden_size,
            runner.model.lm_head_weight.dtype, runner.device, use_graphs=False,
        )  # fmt: skip
        policy = engine.step_policy = dataclasses.replace(engine.step_policy, expander=expander)
        decode_steps = len(SID_LEVELS)

        def keys(group: list[Any]) -> None:
            for state in group:
                cohort_key(state, policy)

        def advance(chunks: list[tuple[Any, Any]]) -> None:
            advance_cohorts(chunks, policy)

        def life(chunks: list[tuple[Any, Any]]) -> None:
            for _ in range(decode_steps):
                advance_cohorts(chunks, policy)

        for mixed in (False, True):
            name = "mixed" if mixed else "shared"
            expander.replay = False
            states = admitted_states(engine, args, mixed)  # prefilled: their prompt step
            rows = sum(s.num_rows for s in states)
            hidden = torch.randn(
                (rows, mc.hidden_size), dtype=runner.model.lm_head_weight.dtype,
                generator=torch.Generator().manual_seed(3),
            )  # fmt: skip
            results[f"digest_{name}"] = digest_step(states, hidden, policy)
            expander.replay = True
            first = snapshot(states)  # as the prefill left them
            later = snapshot(states)
            keys(later)  # as an earlier step of this shape left them: their specs built
            if args.profile:
                profile = cProfile.Profile()
                for i in range(args.warmup + args.repeats):
                    chunks = chunks_of(snapshot(later), hidden)
                    if i >= args.warmup:
                        profile.enable()
                    advance_cohorts(chunks, policy)
                    profile.disable()
                print(f"--- {name}: {args.repeats} calls of advance_cohorts")
                pstats.Stats(profile).sort_stats("tottime").print_stats(args.profile)
            else:
                figures = {
                    "keys": (lambda s=later: s, keys),
                    "keys_next": (lambda s=first: snapshot(s), keys),
                    "advance": (lambda s=later, h=hidden: chunks_of(snapshot(s), h), advance),
                    "life": (lambda s=first, h=hidden: chunks_of(snapshot(s), h), life),
                }
                for figure, (setup, call) in figures.items():
                    samples = time_calls(args.repeats, args.warmup, setup, call, lambda: None)
                    results[f"{figure}_{name}_us"] = median_us(samples)
            for state in states:
                engine.scheduler.finish(state)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=12, help="requests in the cohort")
    parser.add_argument("--beams", type=int, default=50, help="beam width (= n)")
    parser.add_argument("--prompt", type=int, default=300, help="prompt tokens")
    parser.add_argument("--repeats", type=int, default=300, help="timed calls per figure")
    parser.add_argument("--warmup", type=int, default=20, help="untimed calls first")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--profile", type=int, default=0, help="print cProfile's top N instead")
    parser.add_argument("--root", type=Path, help="import the package from this checkout")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    report(parser.parse_args(), bench)


if __name__ == "__main__":
    main()
