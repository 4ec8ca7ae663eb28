"""A captured forward replays on new inputs written into its static buffers; garbage that
becomes collectable during a capture (an old engine's CUDA graphs in a reference cycle) is not
finalized inside it."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
import torch

from widebeam.services.decoder.runner.graph_capture import capture

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


class _Cycle:
    """An object in a reference cycle (only the collector frees it) holding `payload`."""

    def __init__(self, payload: object, on_free: Callable[[], None] | None = None) -> None:
        self.me = self
        self.payload = payload
        self.on_free = on_free

    def __del__(self) -> None:
        if self.on_free is not None:
            self.on_free()


def _orphan_in_a_cycle(payload: object, on_free: Callable[[], None] | None = None) -> None:
    _Cycle(payload, on_free)  # unreachable on return: garbage for the next collection


def _allocate_past_a_collection_threshold() -> list[list[int]]:
    """Enough new container objects to trigger a generation-0 collection (threshold 700)."""
    return [[i] for i in range(5 * gc.get_threshold()[0] + 100)]


def test_no_collection_inside_a_capture(monkeypatch: pytest.MonkeyPatch) -> None:
    """On the CPU, with stand-ins for the CUDA calls: cyclic garbage made while `run` is
    captured stays unfinalized until the capture has ended, and the collector's state is
    restored after (also when the capture fails)."""
    capturing = [False]
    freed_while_capturing: list[bool] = []

    class Graph:
        pass

    class Stream:
        def __init__(self, device: torch.device) -> None:
            pass

        def wait_stream(self, other: object) -> None:
            pass

    @contextmanager
    def on_stream(stream: object) -> Iterator[None]:
        yield

    @contextmanager
    def graph_context(graph: Graph, pool: object = None) -> Iterator[None]:
        capturing[0] = True
        try:
            yield
        finally:
            capturing[0] = False

    monkeypatch.setattr(torch.cuda, "Stream", Stream)
    monkeypatch.setattr(torch.cuda, "stream", on_stream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: Stream(device))
    monkeypatch.setattr(torch.cuda, "CUDAGraph", Graph)
    monkeypatch.setattr(torch.cuda, "graph", graph_context)

    def run() -> int:
        if capturing[0]:
            _orphan_in_a_cycle(None, lambda: freed_while_capturing.append(capturing[0]))
            _allocate_past_a_collection_threshold()
        return 7

    assert gc.isenabled()
    graph, out = capture(run, torch.device("cpu"), None)
    assert isinstance(graph, Graph) and out == 7 and gc.isenabled()
    gc.collect()
    assert freed_while_capturing == [False]  # freed, but after the capture

    def failing() -> int:
        if capturing[0]:
            raise RuntimeError("capture failed")
        return 0

    with pytest.raises(RuntimeError, match="capture failed"):
        capture(failing, torch.device("cpu"), None)
    assert gc.isenabled()
    gc.disable()
    try:  # a caller that had the collector off keeps it off
        capture(run, torch.device("cpu"), None)
        assert not gc.isenabled()
    finally:
        gc.enable()


@pytest.mark.gpu
@needs_cuda
def test_replay_reads_the_static_inputs() -> None:
    device = torch.device("cuda")
    x = torch.arange(8, dtype=torch.float32, device=device)
    weight = torch.randn(8, 8, device=device)
    graph, out = capture(lambda: torch.relu(weight @ x) + 1, device, torch.cuda.graph_pool_handle())
    for step in range(3):
        x.copy_(torch.randn(8, device=device) * step)
        graph.replay()
        torch.testing.assert_close(out, torch.relu(weight @ x) + 1)


@pytest.mark.gpu
@needs_cuda
def test_an_old_graph_collected_during_a_capture_does_not_invalidate_it() -> None:
    """The failure test_fp8_engine_gpu met: an earlier graph, reachable only through a
    reference cycle (as an old engine's are), becomes garbage while the next graph is captured
    and the capture allocates past a collection threshold. Destroying it inside the capture
    would invalidate the capture; the collector waits until the capture has ended."""
    device = torch.device("cuda")
    pool = torch.cuda.graph_pool_handle()
    x = torch.arange(8, dtype=torch.float32, device=device)
    old_graphs = [capture(lambda: x * 2, device, pool)[0]]
    calls = []

    def run() -> torch.Tensor:
        calls.append(len(calls))
        if len(calls) == 2:  # the capture (the first call is its warm-up)
            _orphan_in_a_cycle(old_graphs.pop())
            _allocate_past_a_collection_threshold()
        return x + 1

    graph, out = capture(run, device, pool)
    gc.collect()  # the old graph goes now, outside any capture
    x.fill_(3.0)
    graph.replay()
    torch.cuda.synchronize()
    assert calls == [0, 1] and not old_graphs and torch.equal(out, x + 1)
