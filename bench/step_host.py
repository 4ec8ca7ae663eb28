"""Host (Python/CPU) time of a decode step's preparation and of a beam cohort's selection.

Times, with `time.perf_counter` around each call, what the engine thread does per step for a
W3-like shape (a cohort of `--requests` SID requests of `--beams` beams, `--prompt`-token
prompts, 3 SID levels, the engine's default page size):

* prepare: `decode_inputs` + the bucketed (CUDA-graph) path's `DecodeGraphs.prepare` with the
  Triton backend's packing (`TritonAttention.prepare_decode` -> `pack_decode`). On the CPU
  the packing runs on CPU tensors (no pinned copies); on CUDA it is the engine's own runner;
* replay: the backend's `prepare_decode_replay` of that step's metadata into its bucket's
  static buffers (`init_decode_capture` of the same metadata, built once), what
  `DecodeGraphs.launch` does before each replay (on the CPU: the same copies of CPU tensors);
* cohort: `advance_cohorts` (batched state, the expansion through `ExpansionGraphs`: replayed
  graphs on CUDA, the same padded shapes eagerly on the CPU, whose compute is then included)
  plus `stage_flags` (on the CPU with `--expand replay` the expansion's compute runs once and
  later calls reuse its outputs, as a replay does), for a cohort whose requests come from one
  previous cohort (`shared`) and from one each (`mixed`, whose states are gathered);
* stage: `stage_on_host` of that cohort's step outputs alone (part of `cohort`: the host
  copies and one `HostStep` per request).

The requests are the tiny test model's (`services/decoder/testing/tiny_model.py`); each repeat
runs the same step on fresh copies of the same states. Prints the median of each timing in
microseconds (and JSON with --json).

    .venv/bin/python bench/step_host.py [--device cpu|cuda] [--repeats 200]
    # the code of another checkout (a `git worktree` of the baseline):
    .venv/bin/python bench/step_host.py --root /tmp/before-step
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import importlib.util
import json
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

SID_LEVELS = (16, 16, 16)
CATALOG_ITEMS = 300


def import_package_from(root: Path) -> None:
    """Import `widebeam` (and `widebeam.services`) from `root` instead of the installed tree."""

    def load(name: str, folder: Path) -> ModuleType:
        spec = importlib.util.spec_from_file_location(
            name, folder / "__init__.py", submodule_search_locations=[str(folder)]
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module

    load("widebeam", root / "widebeam")
    sys.modules["widebeam"].services = load("widebeam.services", root / "services")  # type: ignore[attr-defined]


def median_us(samples: list[float]) -> float:
    return statistics.median(samples) * 1e6


def build_engine(tmp: Path, device: str) -> Any:
    import json as json_lines

    from widebeam.services.decoder.config import EngineConfig
    from widebeam.services.decoder.engine import Engine
    from widebeam.services.decoder.testing.tiny_model import write_tiny_model

    model_dir = write_tiny_model(tmp / "model", sid_levels=SID_LEVELS, base_vocab=200, seed=7)
    rng = random.Random(11)
    catalog = tmp / "catalog.jsonl"
    with catalog.open("w") as fh:
        for i in range(CATALOG_ITEMS):
            sid = [rng.randrange(size) for size in SID_LEVELS]
            fh.write(json_lines.dumps({"item_id": f"item-{i}", "sid": sid}) + "\n")
    config = EngineConfig(
        model_dir=str(model_dir),
        catalog_path=str(catalog),
        device=device,
        dense_expansion_limit=0,  # the tiny vocabulary would rank densely: stream as W3 does
        admission_max_wait_steps=0,
    )
    return Engine(config)


def admitted_states(engine: Any, args: argparse.Namespace, mixed: bool) -> list[Any]:
    """`args.requests` requests after their first (prompt) step: one cohort, or one each."""
    from widebeam.services.decoder.requests.spec import GenerationRequest

    rng = random.Random(5)
    begin = engine.sid_layout.begin_token_id
    tag = "mixed" if mixed else "shared"
    for i in range(args.requests):
        prompt = (*(rng.randrange(200) for _ in range(args.prompt - 1)), begin)
        engine.submit(
            GenerationRequest(
                f"{tag}-{i}", prompt, beam_width=args.beams, n=args.beams,
                max_new_tokens=len(SID_LEVELS) + 1, constrained=True, normalization="sid",
            )
        )  # fmt: skip
    states = engine.scheduler.admit()
    assert len(states) == args.requests, f"admitted {len(states)} of {args.requests}"
    if mixed:
        for state in states:
            engine._prefill([state])
    else:
        engine._prefill(states)
    return states


def fresh_copies(states: list[Any]) -> list[Any]:
    """Copies a step can advance without touching `states` (tensors are replaced, not written)."""
    copies = []
    for state in states:
        twin = copy.copy(state)
        twin.search = copy.copy(state.search)
        twin.search.host_steps = list(state.search.host_steps)
        copies.append(twin)
    return copies


def replayed(expansion_graphs: type) -> type:
    """`ExpansionGraphs` whose eager expansion is computed once per bucket and then returned
    as a graph replay returns its static outputs: the host work around it, without the CPU's
    compute (every repeat runs the same step on the same inputs, so the outputs are the same)."""

    class Replayed(expansion_graphs):  # type: ignore[misc, valid-type]
        def _expand(self, spec: Any, entry: Any) -> Any:
            if not hasattr(self, "_static"):
                self._static: dict[int, Any] = {}
            if id(entry) not in self._static:
                self._static[id(entry)] = super()._expand(spec, entry)
            return self._static[id(entry)]

    return Replayed


def time_calls(
    repeats: int, warmup: int, setup: Callable[[], Any], call: Callable[[Any], Any], sync: Any
) -> list[float]:
    samples = []
    for i in range(warmup + repeats):
        arg = setup()
        sync()
        start = time.perf_counter()
        call(arg)
        elapsed = time.perf_counter() - start
        sync()
        if i >= warmup:
            samples.append(elapsed)
    return samples


def bench(args: argparse.Namespace) -> dict[str, float]:
    import torch

    from widebeam.kernels.attention.triton_backend import TritonAttention
    from widebeam.services.decoder.runner.beam_cohorts import advance_cohorts
    from widebeam.services.decoder.runner.decode_graphs import DecodeGraphs
    from widebeam.services.decoder.runner.decode_inputs import decode_inputs
    from widebeam.services.decoder.runner.expansion_graphs import ExpansionGraphs
    from widebeam.services.decoder.runner.stop_flags import stage_flags
    from widebeam.services.decoder.search.beam_host_step import stage_on_host

    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    cuda = args.device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp, torch.inference_mode():
        engine = build_engine(Path(tmp), args.device)
        runner = engine.runner
        device = runner.device
        graphs = runner.graphs
        if graphs is None:  # the CPU: the bucketed path with the Triton backend's packing
            page_size = engine.scheduler.pages.page_size
            backend = TritonAttention(page_size=page_size)
            graphs = DecodeGraphs(None, backend, runner.layout, 0, device, False)  # type: ignore[arg-type]
        policy = engine.step_policy
        if not isinstance(policy.expander, ExpansionGraphs):
            mc = runner.model.config
            kind = ExpansionGraphs if args.expand == "compute" else replayed(ExpansionGraphs)
            expander = kind(
                runner.raw_logits, mc.vocab_size, mc.hidden_size,
                runner.model.lm_head_weight.dtype, device, use_graphs=False,
            )  # fmt: skip
            policy = dataclasses.replace(policy, expander=expander)
        for mixed in (False, True):
            name = "mixed" if mixed else "shared"
            states = admitted_states(engine, args, mixed)
            rows = sum(s.num_rows for s in states)
            hidden = torch.randn(
                (rows, runner.model.config.hidden_size),
                dtype=runner.model.lm_head_weight.dtype, device=device,
            )  # fmt: skip

            def prepare(group: list[Any]) -> Any:
                return graphs.prepare(decode_inputs(group, device))

            def cohort(group: list[Any], hidden: torch.Tensor = hidden) -> None:
                chunks, row = [], 0
                for state in group:
                    chunks.append((state, hidden[row : row + state.num_rows]))
                    row += state.num_rows
                advance_cohorts(chunks, policy)
                stage_flags(group)

            results[f"prepare_{name}_us"] = median_us(
                time_calls(args.repeats, args.warmup, lambda s=states: s, prepare, sync)
            )
            step = prepare(states)
            static = graphs.backend.init_decode_capture(step.metadata, graphs.layout)
            results[f"replay_{name}_us"] = median_us(
                time_calls(args.repeats, args.warmup, lambda m=step.metadata: m,
                           lambda m, t=static: graphs.backend.prepare_decode_replay(t, m), sync)
            )  # fmt: skip
            results[f"cohort_{name}_us"] = median_us(
                time_calls(args.repeats, args.warmup, lambda s=states: fresh_copies(s),
                           cohort, sync)
            )  # fmt: skip
            stepped = fresh_copies(states)
            cohort(stepped)
            outputs = stepped[0].search._outputs  # the cohort's [B, ., k] step outputs
            results[f"stage_{name}_us"] = median_us(
                time_calls(args.repeats, args.warmup, lambda o=outputs: o, stage_on_host, sync)
            )
            for state in states:
                engine.scheduler.finish(state)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", help="cpu | cuda")
    parser.add_argument("--requests", type=int, default=4, help="requests in the cohort")
    parser.add_argument("--beams", type=int, default=50, help="beam width (= n)")
    parser.add_argument("--prompt", type=int, default=300, help="prompt tokens")
    parser.add_argument("--repeats", type=int, default=200, help="timed calls per figure")
    parser.add_argument("--warmup", type=int, default=20, help="untimed calls first")
    parser.add_argument(
        "--expand", choices=("replay", "compute"), default="replay",
        help="CPU: the expansion's outputs computed once and reused as a replay's (replay) "
        "or computed eagerly every time (compute)",
    )  # fmt: skip
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--root", type=Path, help="import the package from this checkout")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    report(parser.parse_args(), bench)


def report(args: argparse.Namespace, bench: Callable[[argparse.Namespace], dict[str, Any]]) -> None:
    """Runs `bench` on the code of `args.root` (this checkout's without it) and prints its
    figures, one a line or (`args.json`) as one JSON object."""
    if args.root is not None:
        import_package_from(args.root.resolve())
    results = bench(args)
    if args.json:
        print(json.dumps(results))
        return
    for name, value in results.items():
        shown = f"{value:10.1f}" if isinstance(value, float) else f"{value:>10s}"
        print(f"{name:24s} {shown}")


if __name__ == "__main__":
    main()
