"""Streamed beam steps replayed from CUDA graphs, one per expansion spec and batch bucket.

A cohort's inputs are copied into the bucket's static buffers (hidden states, search state, trie
nodes, each request's step scalars), the captured `expand` replays, and its packed outputs are
cloned out (the next replay overwrites them). Requests beyond the cohort's size are padding:
every request of a batch is computed independently, so their stale buffers never reach a real
one. Eager mode (`use_graphs=False`) runs the same padded shapes without capture, so both modes
give bit-identical steps.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from widebeam.services.decoder.runner.capture_counts import CaptureCounts, GraphKind
from widebeam.services.decoder.runner.graph_capture import GraphCache
from widebeam.services.decoder.search.beam_expansion import (
    CohortBatch,
    Expander,
    ExpansionInputs,
    ExpansionSpec,
    Head,
    expand,
)
from widebeam.services.decoder.search.beam_step import Scalar
from widebeam.services.decoder.search.beam_step_outputs import StepOutputs

# Cohorts up to this size get graphs of their exact size, larger ones round up to a multiple of
# BATCH_STEP: a padding request costs a full request's LM head, so coarse buckets (powers of
# two: 3 -> 4, 12 -> 16) can cost more than the graph saves.
EXACT_BATCH = 16
BATCH_STEP = 8
# A cohort runs as batches of at most this many requests (`runner/beam_cohorts.py`), so a busy
# server's cohorts stay within the buckets captured at start-up (`capture_plan.py`); a batch of
# 32 requests already shares its launches over 32 * k rows.
MAX_COHORT = 32


def batch_bucket(batch: int) -> int:
    if batch <= EXACT_BATCH:
        return batch
    return -(-batch // BATCH_STEP) * BATCH_STEP


class _Entry(NamedTuple):
    hidden: torch.Tensor  # [cap * rows_each, hidden] model dtype
    inputs: StepOutputs  # [cap, ·, k]; its state rows are the step's input search state
    nodes: torch.Tensor | None  # [cap * rows_each] int64
    scalars: torch.Tensor  # [cap, len(Scalar)] fp32
    eos_ids: torch.Tensor  # [n_eos] int64
    graph: torch.cuda.CUDAGraph | None
    outputs: StepOutputs | None  # the graph's static outputs


class ExpansionGraphs(Expander):
    def __init__(
        self,
        lm_head: Head,
        vocab_size: int,
        hidden_size: int,
        dtype: torch.dtype,
        device: torch.device,
        use_graphs: bool,
        max_graphs: int = 256,  # room for the start-up list's lockstep batches of a few widths
        counts: CaptureCounts | None = None,
    ) -> None:
        super().__init__(lm_head, vocab_size)
        self.hidden_size = hidden_size
        self.dtype = dtype
        self.device = device
        self.cache: GraphCache[tuple[ExpansionSpec, int], _Entry] = GraphCache(
            device, use_graphs, max_graphs, GraphKind.EXPANSION, counts
        )

    @property
    def captures(self) -> int:
        return self.cache.captures

    def run(self, spec: ExpansionSpec, batch: CohortBatch) -> StepOutputs:
        count = len(batch.hiddens)
        cap = batch_bucket(count)
        entry = self.cache.get((spec, cap), lambda: self._build(spec, cap, batch.eos_ids))
        rows = count * spec.rows_each
        torch.cat(batch.hiddens, out=entry.hidden[:rows])
        if batch.shared is not None:
            entry.inputs.load(batch.shared)
        else:
            entry.inputs.load_state(batch.state)
        if entry.nodes is not None:
            assert batch.nodes is not None
            torch.cat(batch.nodes, out=entry.nodes[:rows])
        host = torch.from_numpy(np.array(batch.scalars, dtype=np.float32))  # [B, 4] fp32
        if self.device.type == "cuda":
            host = host.pin_memory()  # a queued copy: the host does not wait
        entry.scalars[:count].copy_(host, non_blocking=True)
        if entry.graph is None:
            outputs = self._expand(spec, entry)
        else:
            entry.graph.replay()
            assert entry.outputs is not None
            outputs = entry.outputs
        return outputs.head(count)

    def _expand(self, spec: ExpansionSpec, entry: _Entry) -> StepOutputs:
        inputs = ExpansionInputs(
            entry.hidden, entry.inputs.state, entry.nodes, entry.scalars, entry.eos_ids
        )
        return expand(spec, inputs, self.lm_head, self.vocab_size)

    def _build(self, spec: ExpansionSpec, cap: int, eos_ids: torch.Tensor) -> _Entry:
        rows = cap * spec.rows_each
        device = self.device
        hidden = torch.zeros((rows, self.hidden_size), dtype=self.dtype, device=device)
        nodes = None
        if spec.constraint is not None:
            nodes = torch.zeros(rows, dtype=torch.int64, device=device)
        entry = _Entry(
            hidden,
            StepOutputs.empty(cap, spec.num_beams, device),
            nodes,
            torch.ones((cap, len(Scalar)), dtype=torch.float32, device=device),
            eos_ids.clone(),
            None,
            None,
        )
        if not self.cache.use_graphs:
            return entry
        graph, outputs = self.cache.capture(lambda: self._expand(spec, entry))
        return entry._replace(graph=graph, outputs=outputs)
