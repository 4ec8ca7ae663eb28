"""Capturing device work into a CUDA graph, the per-bucket cache of such graphs (decode and
prefill forwards, beam expansions), and what the bucketed forwards share (`BucketedForward`)."""

from __future__ import annotations

import gc
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import InitVar, dataclass
from typing import ClassVar, Generic, TypeVar

import torch

from widebeam.kernels.attention.base import AttentionBackend
from widebeam.kernels.attention.metadata import AttentionLayout
from widebeam.services.decoder.runner.capture_counts import CaptureCounts, GraphKind

Key = TypeVar("Key", bound=Hashable)
Entry = TypeVar("Entry")
Out = TypeVar("Out")
Forward = TypeVar("Forward", bound=Callable[..., torch.Tensor])


def capture(
    run: Callable[[], Out],  # launches device work only: no host reads
    device: torch.device,
    pool: object | None,  # torch.cuda.graph_pool_handle(), shared by a set of graphs
) -> tuple[torch.cuda.CUDAGraph, Out]:  # the graph and its (static) outputs
    """Warm up on a side stream (kernel compilation, cuBLAS workspaces), as capture requires,
    then capture `run` on it. The caller's static inputs must make the warm-up harmless.

    The warm-up is `run` itself on the same static buffers, so every kernel the capture
    launches, at every specialization (Triton's constexprs, 16-divisible ints and pointers:
    the caching allocator aligns every block to 512 bytes), is compiled and loaded before it.
    The capture runs with the cyclic garbage collector off (`_no_collection`)."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        run()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with _no_collection(), torch.cuda.graph(graph, pool=pool):
        out = run()
    return graph, out


@contextmanager
def _no_collection() -> Iterator[None]:
    """No automatic garbage collection inside: a collection during a capture can finalize
    objects that own CUDA resources, e.g. the CUDA graphs of an engine no longer referenced
    (its graphs and runner form a reference cycle, freed only by the collector). Destroying a
    graph is an API call CUDA forbids while a stream captures (globally, by default): it
    invalidates the capture, the destructor only warns ("operation not permitted when stream is
    capturing (function reset)"), and the capture fails at its next launch ("operation failed
    due to a previous error during capture"). Garbage found meanwhile waits for the next
    collection, after the capture."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class GraphCache(Generic[Key, Entry]):
    """Bucket -> its entry (static buffers, and the captured graph when `use_graphs`); the
    least recently used is dropped beyond `max_entries`. The graphs share one memory pool.
    Each capture is recorded in `counts` (the engine's, when given) under `kind`."""

    def __init__(
        self,
        device: torch.device,
        use_graphs: bool,
        max_entries: int,
        kind: GraphKind = GraphKind.DECODE,
        counts: CaptureCounts | None = None,
    ) -> None:
        self.device = device
        self.kind = kind
        self.counts = counts
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
        if self.counts is not None:
            self.counts.record(self.kind)
        graph, out = capture(run, self.device, self.pool)
        torch.cuda.synchronize(self.device)  # a capture is rare: its full cost, counted
        self.capture_seconds += time.perf_counter() - start
        return graph, out


@dataclass(eq=False)
class BucketedForward(Generic[Forward, Key, Entry]):
    """A model forward run at bucketed shapes through one attention backend: per bucket, static
    buffers (and, with `use_graphs`, the graph captured over them); padding tokens or rows write
    their KV to the trash slot. `forward` only launches device work (no host reads), so it can
    be captured."""

    forward: Forward
    backend: AttentionBackend
    layout: AttentionLayout
    trash_slot: int
    device: torch.device
    use_graphs: InitVar[bool]
    counts: CaptureCounts | None = None  # where captures are recorded (the engine's)
    # buckets kept (default: the class' max_graphs); the least recently used is dropped beyond
    max_entries: int | None = None
    max_graphs: ClassVar[int] = 16
    kind: ClassVar[GraphKind]

    def __post_init__(self, use_graphs: bool) -> None:
        self.cache: GraphCache[Key, Entry] = GraphCache(
            self.device, use_graphs, self.max_entries or self.max_graphs, self.kind, self.counts
        )

    @property
    def captures(self) -> int:
        return self.cache.captures
