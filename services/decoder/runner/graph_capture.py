"""Capturing one forward into a CUDA graph (shared by the decode and prefill buckets)."""

from __future__ import annotations

from collections.abc import Callable

import torch


def capture(
    run: Callable[[], torch.Tensor],  # launches device work only: no host reads
    device: torch.device,
    pool: object | None,  # torch.cuda.graph_pool_handle(), shared by a set of graphs
) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:  # the graph and its (static) output
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
