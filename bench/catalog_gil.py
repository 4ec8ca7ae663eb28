"""How long the serving process's per-version catalog work holds the GIL, and what finished
beams' item lookups cost (issue 21's hot swap; the W3 host path).

A decoder maps each new catalog version and derives its tensors on one thread while others
serve; any single call that holds the GIL for long stalls them all. A probe thread wakes every
millisecond beside each phase and records the longest gap between its wake-ups (the longest
hold). Phases, on a trie of `--items` random SIDs built in this process: `SidTrie.from_arrays`
(the parent's rebuild of a version its load child sent), `ServedCatalog.build` (trie tensors,
edge keys) all in one process and from arrays a load child derived (`constraint_arrays`, timed
apart: the child's part), dropping a served version (its last reference, as the engine drops
it) and a collector's pass after it, and `PathItems.items` for `--beams` finished beams.

    .venv/bin/python bench/catalog_gil.py [--items 10000000] [--beams 1000]  # $OUT/*.json
    .venv/bin/python bench/catalog_gil.py --smoke   # tests/bench/test_catalog_gil_smoke.py
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from catalog_scale import commit, machine, make_catalog

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from widebeam.services.catalog.sid_layout import SidLayout  # noqa: E402
from widebeam.services.catalog.trie import SidTrie  # noqa: E402
from widebeam.services.catalog.trie_build import build_arrays  # noqa: E402
from widebeam.services.decoder.constraint.path_items import PathItems  # noqa: E402
from widebeam.services.decoder.constraint.trie_arrays import constraint_arrays  # noqa: E402
from widebeam.services.decoder.server.served_catalog import ServedCatalog  # noqa: E402

CODEBOOK = 8192
LAYOUT = SidLayout.parse(f"10:{CODEBOOK},{10 + CODEBOOK}:{CODEBOOK},{10 + 2 * CODEBOOK}:{CODEBOOK}"
                         f";begin=1;end=2")  # fmt: skip


class GilProbe:
    """A thread that sleeps 1 ms at a time; a gap between its wake-ups far over 1 ms is a
    stretch during which it could not take the GIL back."""

    def __init__(self) -> None:
        self.longest = 0.0
        self._running = True
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        last = time.perf_counter()
        while self._running:
            time.sleep(0.001)
            now = time.perf_counter()
            self.longest = max(self.longest, now - last)
            last = now

    def stop(self) -> float:  # ms
        self._running = False
        self._thread.join()
        return self.longest * 1000


def phase(name: str, work: Callable[[], object], rows: list[dict]) -> object:
    probe = GilProbe()
    start = time.perf_counter()
    result = work()
    elapsed = time.perf_counter() - start
    rows.append({"phase": name, "ms": elapsed * 1000, "longest_gil_hold_ms": probe.stop()})
    print(f"{name}: {elapsed * 1000:.0f} ms, longest GIL hold {rows[-1]['longest_gil_hold_ms']:.0f}"
          " ms", flush=True)  # fmt: skip
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=10_000_000)
    parser.add_argument("--beams", type=int, default=1000)
    parser.add_argument("--smoke", action="store_true", help="20,000 items, 100 beams")
    args = parser.parse_args()
    if args.smoke:
        args.items, args.beams = 20_000, 100
    ids = [f"item-{i}" for i in range(args.items)]
    codes = make_catalog(args.items, 3, CODEBOOK, 0.1, 1)["sids"]
    trie = SidTrie(LAYOUT, *build_arrays(ids, codes, LAYOUT))
    del ids
    arrays = trie.to_arrays()
    rows: list[dict] = []
    for _ in range(2):  # the second round: allocator and caches warm
        loaded = phase("SidTrie.from_arrays", lambda: SidTrie.from_arrays(
            arrays, dense_cell_budget=trie.dense_cell_budget, copy=False), rows)  # fmt: skip
        build = lambda t=loaded: ServedCatalog.build("bench", t, "1", "cpu")  # noqa: E731
        served = phase("ServedCatalog.build (all in this process)", build, rows)
        served = None
        # The decoder's path: its load child derives the arrays, this process only wraps them.
        derived = phase("constraint_arrays (the load child's part)",
                        lambda t=loaded: constraint_arrays(t), rows)  # fmt: skip
        wrap = lambda t=loaded, d=derived: ServedCatalog.build("bench", t, "1", "cpu", d)  # noqa: E731
        served = phase("ServedCatalog.build from derived arrays", wrap, rows)
        del derived

        def drop() -> None:  # what the engine does: its last reference goes
            nonlocal served
            served = None

        phase("drop a served version", drop, rows)
        # A version is freed by reference counting (nothing of it is in a cycle), so a
        # collector's pass finds nothing of it: its time is that of this process' objects.
        phase("gc.collect() after the drop", gc.collect, rows)
    lookup = PathItems(trie)
    rng = np.random.default_rng(0)
    picked = trie.sids[rng.choice(trie.num_sids, size=args.beams, replace=False)]  # [beams, 3]
    bases = np.array([level.base for level in LAYOUT.levels], dtype=np.int64)
    paths = np.concatenate(
        (picked + bases, np.full((args.beams, 1), LAYOUT.end_token_id)), axis=1
    ).astype(np.int64)  # [beams, 4]: the three codes' tokens and the end token
    start = trie.start_node(prompt_ends_with_begin=True)
    items = lookup.items(start, paths)
    assert all(items), "every picked SID names an item"
    repeats = 20
    began = time.perf_counter()
    for _ in range(repeats):
        lookup.items(start, paths)
    per_call = (time.perf_counter() - began) / repeats * 1000
    print(f"PathItems.items, {args.beams} finished beams: {per_call:.2f} ms", flush=True)
    result = {
        "machine": machine(),
        "commit": commit(),
        "items": args.items,
        "beams": args.beams,
        "phases": rows,
        "path_items_ms": per_call,
        "command": " ".join([".venv/bin/python", "bench/catalog_gil.py", *sys.argv[1:]]),
    }
    out = Path(os.environ.get("OUT", "bench-out"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "catalog_gil.json").write_text(json.dumps(result, indent=1))
    print("\n| phase | ms | longest GIL hold ms |\n|---|---:|---:|")
    for row in rows[len(rows) // 2 :]:
        print(f"| {row['phase']} | {row['ms']:.0f} | {row['longest_gil_hold_ms']:.0f} |")
    print(f"| PathItems.items ({args.beams} beams) | {per_call:.2f} | |")


if __name__ == "__main__":
    main()
