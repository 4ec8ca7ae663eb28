"""Capturing device work into a CUDA graph, and the per-bucket cache of such graphs (decode and
prefill forwards, beam expansions)."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

import torch

Key = TypeVar("Key", bound=Hashable)
Entry = TypeVar("Entry")
Out = TypeVar("Out")


def capture(
    run: Callable[[], Out],  # launches device work only: no host reads
    device: torch.device,
    pool: object | None,  # torch.cuda.graph_pool_handle(), shared by a set of graphs
) -> tuple[torch.cuda.CUDAGraph, Out]:  # the graph and its (static) outputs
    """Warm up on a side stream (kernel compilation, cuBLAS workspaces), as capture requires,
    then capture `run` on it. The caller's static inputs must make the warm-up harmless."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        run()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        out = run()
    return graph, out


class GraphCache(Generic[Key, Entry]):
    """Bucket -> its entry (static buffers, and the captured graph when `use_graphs`); the
    least recently used is dropped beyond `max_entries`. The graphs share one memory pool."""

    def __init__(self, device: torch.device, use_graphs: bool, max_entries: int) -> None:
        self.device = device
        self.use_graphs = use_graphs
        self.max_entries = max_entries
        self.entries: OrderedDict[Key, Entry] = OrderedDict()
        self.pool = torch.cuda.graph_pool_handle() if use_graphs else None
        self.captures = 0
        self.capture_seconds = 0.0  # wall time spent capturing (benchmarks report it)

    def get(self, key: Key, build: Callable[[], Entry]) -> Entry:
        entry = self.entries.get(key)
        if entry is None:
            entry = build()
            if len(self.entries) >= self.max_entries:
                self.entries.popitem(last=False)
            self.entries[key] = entry
        self.entries.move_to_end(key)
        return entry

    def capture(self, run: Callable[[], Out]) -> tuple[torch.cuda.CUDAGraph, Out]:
        start = time.perf_counter()
        self.captures += 1
        graph, out = capture(run, self.device, self.pool)
        torch.cuda.synchronize(self.device)  # a capture is rare: its full cost, counted
        self.capture_seconds += time.perf_counter() - start
        return graph, out
