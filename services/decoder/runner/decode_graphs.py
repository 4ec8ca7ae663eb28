"""The decode forward at bucketed shapes, replayed from CUDA graphs.

A step's rows are rounded up here (`row_bucket`); the attention backend rounds the rest of its
metadata (requests, suffix and prompt lengths, its tiles: `decode_bucket`). The step's inputs
are copied into the bucket's static buffers and its attention metadata into the backend's
(`prepare_decode_replay`); padding rows write their KV to a trash slot and their outputs are
dropped. Eager mode (`use_graphs=False`) runs the same padded shapes from the same static
buffers without capture, so graph and eager steps launch the same kernels on the same shapes
and give bit-identical hidden states.

The graphs of one row bucket (the backend may have several attention buckets per row count)
write one shared output buffer: a replay is read before the next one, so the graphs keep no
memory of their own beyond their static inputs and metadata.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch

from widebeam.kernels.attention.buckets import pow2
from widebeam.kernels.attention.metadata import DecodeBatch
from widebeam.services.decoder.runner.capture_counts import GraphKind
from widebeam.services.decoder.runner.graph_capture import BucketedForward
from widebeam.services.decoder.runner.step_inputs import DecodeInputs, DecodeShape, PreparedStep

SMALL_ROWS = 1024  # up to here rows round to a power of two, beyond to a multiple of ROW_STEP
ROW_STEP = 512

# (tokens [R], positions [R], write_slots [R], attention metadata) -> [R, hidden]
DecodeForward = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, object], torch.Tensor]


def row_bucket(rows: int) -> int:
    if rows <= SMALL_ROWS:
        return pow2(rows, 8)
    return math.ceil(rows / ROW_STEP) * ROW_STEP


@dataclass
class StaticDecodeInputs:
    """One bucket's input buffers; the captured graph reads exactly these tensors."""

    tokens: torch.Tensor  # [rows] int64
    positions: torch.Tensor  # [rows] int64
    write_slots: torch.Tensor  # [rows] int64

    def load(self, inputs: DecodeInputs, trash_slot: int) -> None:
        n = inputs.tokens.shape[0]
        self.tokens[:n].copy_(inputs.tokens)
        self.tokens[n:].zero_()
        self.positions[:n].copy_(inputs.positions)
        self.positions[n:].zero_()
        self.write_slots[:n].copy_(inputs.write_slots)
        self.write_slots[n:].fill_(trash_slot)


class _Entry(NamedTuple):
    inputs: StaticDecodeInputs
    metadata: object  # the backend's static attention buffers (init_decode_capture)
    graph: torch.cuda.CUDAGraph | None
    hidden: torch.Tensor | None  # [rows, hidden] the graph's output (None in eager mode)


class DecodeGraphs(BucketedForward[DecodeForward, DecodeShape, _Entry]):
    """Bucketed decode forward; `forward(tokens, positions, write_slots, metadata)` runs the
    model. A step is `prepare` (host work, can run while the device finishes the previous step)
    then `launch`."""

    max_graphs = 160  # room for a start-up list of ~50 row buckets x 3 attention buckets
    kind = GraphKind.DECODE

    def __post_init__(self, use_graphs: bool) -> None:
        super().__post_init__(use_graphs)
        self._outputs: dict[int, torch.Tensor] = {}  # rows -> [rows, hidden], graphs' output

    def capture_buckets(self, rows: int) -> int:
        """Build (capture, with graphs) every attention bucket the backend lists for the row
        bucket of `rows` (`decode_buckets`) that is not built yet; returns how many."""
        rows = row_bucket(rows)
        built = 0
        for bucket in self.backend.decode_buckets(rows, self.layout):
            shape = DecodeShape(rows, bucket)
            if shape in self.cache.entries:
                continue
            empty = self.backend.prepare_decode(DecodeBatch(()), rows, self.layout, bucket)
            self.cache.get(shape, lambda s=shape, m=empty: self._build(s, m))
            built += 1
        return built

    def prepare(self, inputs: DecodeInputs) -> PreparedStep:
        """The host part of a step (bucket, attention metadata); queues copies, never waits."""
        rows = row_bucket(inputs.tokens.shape[0])
        bucket = self.backend.decode_bucket(inputs.batch, rows, self.layout)
        metadata = self.backend.prepare_decode(inputs.batch, rows, self.layout, bucket)
        return PreparedStep(inputs, metadata, DecodeShape(rows, bucket))

    def launch(self, step: PreparedStep) -> torch.Tensor:  # [R, hidden]
        shape = step.shape
        if shape is None:
            raise ValueError("an unbucketed step: prepare it with DecodeGraphs.prepare")
        rows = step.inputs.tokens.shape[0]
        entry = self.cache.get(shape, lambda: self._build(shape, step.metadata))
        entry.inputs.load(step.inputs, self.trash_slot)
        self.backend.prepare_decode_replay(entry.metadata, step.metadata)
        if entry.graph is None:
            static = entry.inputs
            hidden = self.forward(
                static.tokens, static.positions, static.write_slots, entry.metadata
            )
            return hidden[:rows]
        entry.graph.replay()
        assert entry.hidden is not None
        return entry.hidden[:rows].clone()  # the next replay overwrites the graph's output

    def _build(self, shape: DecodeShape, metadata: object) -> _Entry:
        def zeros() -> torch.Tensor:
            return torch.zeros(shape.rows, dtype=torch.int64, device=self.device)

        inputs = StaticDecodeInputs(zeros(), zeros(), zeros())
        static = self.backend.init_decode_capture(metadata, self.layout)
        if not self.cache.use_graphs:
            return _Entry(inputs, static, None, None)
        return self._capture(inputs, static)

    def _capture(self, inputs: StaticDecodeInputs, metadata: object) -> _Entry:
        rows = inputs.tokens.shape[0]
        out = self._outputs.get(rows)

        def run() -> torch.Tensor:
            hidden = self.forward(inputs.tokens, inputs.positions, inputs.write_slots, metadata)
            if out is None:
                return hidden
            out.copy_(hidden)  # the graph's own output block goes back to the pool
            return out

        # The warm-up writes the trash slot only: inputs are still all padding here.
        inputs.write_slots.fill_(self.trash_slot)
        graph, hidden = self.cache.capture(run)
        self._outputs.setdefault(rows, hidden)
        return _Entry(inputs, metadata, graph, hidden)
