"""The engine thread's host cost of a finished Recommend request's answer and of preparing one,
and the gRPC thread's cost of its reply, per request, on the CPU (the W3 shape: beam = n = 50,
3 SID levels of 512 codes, a 430k-SID catalog, 60-item histories, ~300-token prompts).

A tiny random model runs the requests to the end on the CPU once (real finished beam searches
over the catalog's trie); then each of these is timed per request, many times over:

* ``output``: ``RequestState.output`` (the engine's ``_answer``: the search's results, the
  items of every path, the ``RequestOutput``);
* ``results`` / ``items``: its two parts alone (``BeamSearch.results``,
  ``TrieConstraint.items_for_paths``);
* ``prepare``: ``RecommendCall.__call__`` (history ids -> SIDs -> prompt -> request);
* ``recommend_response`` / ``generate_response``: the replies built on the gRPC thread.

Medians (over all requests and repeats) are printed in microseconds per request, with a digest
of everything the timed calls returned: two checkouts that print the same digest answered
identically. ``--source`` times another checkout of the code (a git worktree of HEAD, say)
with this same script:

    .venv/bin/python bench/answer_host.py [--sids 430000] [--requests 32] [--repeat 100]
    git worktree add /tmp/before HEAD
    .venv/bin/python bench/answer_host.py --source /tmp/before
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import pickle
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from cache_dir import bench_cache

HISTORY_ITEMS = 60
BEAM = 50
LEVELS = (512, 512, 512)


def use_checkout(root: Path) -> None:
    """Import `widebeam` (and `widebeam.services`) from the checkout at `root` instead of the
    installed one: its two top-level folders, mapped as setup.py maps them."""
    for name, folder in (("widebeam", "widebeam"), ("widebeam.services", "services")):
        init = root / folder / "__init__.py"
        spec = importlib.util.spec_from_file_location(
            name, init, submodule_search_locations=[str(root / folder)]
        )
        assert spec is not None and spec.loader is not None
        module: ModuleType = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    sys.modules["widebeam"].services = sys.modules["widebeam.services"]  # type: ignore[attr-defined]


def median_us(call: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def timed_calls(args: argparse.Namespace) -> dict[str, list[Callable[[], object]]]:
    """Per timed part, one call per request (each returns what that part hands on)."""
    import numpy as np
    import torch
    from catalogs import random_catalog

    from widebeam.services.catalog.default_name import DEFAULT_CATALOG
    from widebeam.services.decoder.config import EngineConfig
    from widebeam.services.decoder.engine import Engine
    from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2 as pb
    from widebeam.services.decoder.runner.request_state import RequestState
    from widebeam.services.decoder.server.convert import generate_response
    from widebeam.services.decoder.server.recommend import (
        RecommendCall,
        parse_recommend,
        recommend_response,
    )
    from widebeam.services.decoder.server.request_limits import RequestLimits
    from widebeam.services.decoder.server.served_catalog import ServedCatalog
    from widebeam.services.decoder.testing.tiny_model import write_tiny_model

    torch.manual_seed(0)
    catalog_path = random_catalog(args.sids, LEVELS, seed=0)
    cache = bench_cache()
    model_dir = cache / "answer-host-model"
    if not (model_dir / "config.json").exists():
        write_tiny_model(model_dir, sid_levels=LEVELS, base_vocab=200, seed=7)
    prompt_len = HISTORY_ITEMS * (len(LEVELS) + 2) + 1
    engine = Engine(
        EngineConfig(
            model_dir=str(model_dir),
            catalog_path=str(catalog_path),
            max_rows=BEAM * args.batch,
            max_kv_slots=args.batch * (prompt_len + BEAM * 8) + 4096,
        )
    )
    served = ServedCatalog.from_constraint(DEFAULT_CATALOG, engine.constraint)
    catalogs = {DEFAULT_CATALOG: served}
    big = 1 << 20
    limits = RequestLimits(big, big, big, big, big, big)

    rng = np.random.default_rng(args.seed)
    calls = []
    for _ in range(args.requests):
        history = [f"i{k}" for k in rng.integers(0, args.sids, HISTORY_ITEMS).tolist()]
        msg = pb.RecommendRequest(history_item_ids=history, n=BEAM, beam_width=BEAM)
        calls.append(RecommendCall(parse_recommend(msg), limits))
    prepared = [call(catalogs) for call in calls]
    requests = [
        type(req)(**{**req.__dict__, "request_id": f"r{i}"}) for i, req in enumerate(prepared)
    ]

    states: dict[str, RequestState] = {}
    answer = Engine._answer

    def keep_state(self: Engine, state: RequestState, cached: int) -> Any:
        states[state.request_id] = state
        return answer(self, state, cached)

    Engine._answer = keep_state  # type: ignore[method-assign]
    outputs = []
    for at in range(0, len(requests), args.batch):
        outputs += engine.generate(requests[at : at + args.batch])
    Engine._answer = answer  # type: ignore[method-assign]
    ordered = [states[f"r{i}"] for i in range(len(requests))]
    answers = [call.answer(out) for call, out in zip(calls, outputs, strict=True)]

    def results(s: RequestState) -> Any:
        return s.search.results(s.resolved.spec.return_logprobs)

    finished = [results(s) for s in ordered]
    timed: dict[str, list[Callable[[], object]]] = {
        "output": [s.output for s in ordered],
        "results": [lambda s=s: results(s) for s in ordered],
        "items": [
            lambda s=s, f=f: s.constraint.items_for_paths(s.resolved.spec.input_ids, f.paths)
            for s, f in zip(ordered, finished, strict=True)
        ],
        "prepare": [lambda c=c: c(catalogs) for c in calls],
        "recommend_response": [lambda a=a: recommend_response(a, "rid") for a in answers],
        "generate_response": [lambda o=o: generate_response("rid", None, o) for o in outputs],
    }
    return timed


def run(args: argparse.Namespace) -> None:
    import widebeam.services

    timed = timed_calls(args)
    digest = hashlib.sha256()
    for name, fns in timed.items():
        for fn in fns:
            value = fn()
            if hasattr(value, "SerializeToString"):
                value = value.SerializeToString(deterministic=True)
            elif hasattr(value, "paths"):  # FinishedBeams: its array as bytes, for pickle
                value = (*value[:-1], value.paths.tolist())
            digest.update(pickle.dumps((name, value)))
    print(f"widebeam.services from {widebeam.services.__path__[0]}")
    print(f"{len(timed['output'])} requests; digest {digest.hexdigest()[:16]}")
    for name, fns in timed.items():
        per_request = []
        for _ in range(args.rounds):
            for fn in fns:
                per_request.append(median_us(fn, args.repeat))
        print(f"{name:>20}: median {statistics.median(per_request):8.1f} us per request")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sids", type=int, default=430_000, help="catalog SIDs (one item each)")
    parser.add_argument("--requests", type=int, default=32, help="Recommend requests run")
    parser.add_argument("--batch", type=int, default=8, help="requests the engine runs at once")
    parser.add_argument("--repeat", type=int, default=100, help="timed calls per request")
    parser.add_argument("--rounds", type=int, default=1, help="passes over all requests")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--source", type=Path, help="a checkout to import widebeam from")
    args = parser.parse_args()
    if args.source is not None:
        use_checkout(args.source.resolve())
    run(args)


if __name__ == "__main__":
    main()
