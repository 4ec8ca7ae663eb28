"""The decode forward at bucketed shapes, replayed from CUDA graphs.

A step's rows, requests (groups), suffix length and prompt length are rounded up to buckets
(`decode_shape`); the step's inputs and packed attention metadata are copied into the bucket's
static buffers, padding rows write their KV to a trash slot and attend to nothing. Eager mode
(`use_graphs=False`) runs the same padded shapes without capture, so graph and eager steps
launch the same kernels on the same shapes and give bit-identical hidden states.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import NamedTuple

import torch

from widebeam.kernels.attention.metadata import DecodeBatch
from widebeam.kernels.attention.packed import PackedDecode, pack_decode
from widebeam.services.decoder.runner.graph_capture import GraphCache
from widebeam.services.decoder.runner.step_inputs import DecodeInputs

SMALL_ROWS = 1024  # up to here rows round to a power of two, beyond to a multiple of ROW_STEP
ROW_STEP = 512
MIN_SUFFIX = 8


class DecodeShape(NamedTuple):
    rows: int  # padded row count
    groups: int  # request (group) capacity
    work: int  # prefix work-item capacity
    suffix: int  # per-row generated-slot capacity
    prompt: int  # prompt table entries per group
    block_rows: int
    splits: int


def _pow2(n: int, floor: int = 1) -> int:
    return max(floor, 1 << max(n - 1, 0).bit_length())


def row_bucket(rows: int) -> int:
    if rows <= SMALL_ROWS:
        return _pow2(rows, 8)
    return math.ceil(rows / ROW_STEP) * ROW_STEP


def decode_shape(
    batch: DecodeBatch,
    rows: int,
    page_size: int,
    block_rows_of: Callable[[int], int],  # widest group's rows -> rows per prefix work item
    splits_of: Callable[[int, int], int],  # (prefix programs, longest prompt) -> splits
) -> DecodeShape:
    groups = batch.groups
    widest = max((g.num_rows for g in groups), default=1)
    block_rows = block_rows_of(_pow2(widest))
    padded_rows = row_bucket(rows)
    group_cap = _pow2(len(groups))
    work = padded_rows // block_rows + group_cap  # each group wastes at most one partial block
    longest = max((int(g.prompt_slots.shape[0]) for g in groups), default=0)
    prompt = _pow2(-(-_pow2(longest) // page_size))
    suffix = _pow2(max((int(g.suffix_slots.shape[1]) for g in groups), default=0), MIN_SUFFIX)
    splits = splits_of(work, _pow2(longest))
    return DecodeShape(padded_rows, group_cap, work, suffix, prompt, block_rows, splits)


@dataclass
class StaticDecodeInputs:
    """One bucket's input buffers; the captured graph reads exactly these tensors."""

    tokens: torch.Tensor  # [rows] int64
    positions: torch.Tensor  # [rows] int64
    write_slots: torch.Tensor  # [rows] int64
    packed: PackedDecode  # capacities of the bucket

    def load(
        self,
        inputs: DecodeInputs,  # the step's rows
        packed: PackedDecode,  # the step's metadata, padded to this bucket
        trash_slot: int,
    ) -> None:
        n = inputs.tokens.shape[0]
        self.tokens[:n].copy_(inputs.tokens)
        self.tokens[n:].zero_()
        self.positions[:n].copy_(inputs.positions)
        self.positions[n:].zero_()
        self.write_slots[:n].copy_(inputs.write_slots)
        self.write_slots[n:].fill_(trash_slot)
        for field in fields(PackedDecode):
            value = getattr(packed, field.name)
            if isinstance(value, torch.Tensor):
                getattr(self.packed, field.name).copy_(value)


class PreparedStep(NamedTuple):
    shape: DecodeShape
    packed: PackedDecode  # padded to the bucket
    inputs: DecodeInputs


class _Entry(NamedTuple):
    inputs: StaticDecodeInputs
    graph: torch.cuda.CUDAGraph | None
    hidden: torch.Tensor | None  # [rows, hidden] the graph's output (None in eager mode)


class DecodeGraphs:
    """Bucketed decode forward; `forward(tokens, positions, write_slots, packed)` runs the model
    (it must only launch device work: no host reads, so it can be captured). A step is
    `prepare` (host work, can run while the device finishes the previous step) then `launch`."""

    def __init__(
        self,
        forward: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, PackedDecode], torch.Tensor],
        shape_of: Callable[[DecodeBatch, int], DecodeShape],
        page_size: int,
        trash_slot: int,
        device: torch.device,
        use_graphs: bool,
        max_graphs: int = 48,
    ) -> None:
        self.forward = forward
        self.shape_of = shape_of
        self.page_size = page_size
        self.trash_slot = trash_slot
        self.device = device
        self.cache: GraphCache[DecodeShape, _Entry] = GraphCache(device, use_graphs, max_graphs)

    @property
    def captures(self) -> int:
        return self.cache.captures

    def prepare(self, inputs: DecodeInputs) -> PreparedStep:
        """The host part of a step (bucket, packed metadata); queues copies, never waits."""
        shape = self.shape_of(inputs.batch, inputs.tokens.shape[0])
        return PreparedStep(shape, self._pack(inputs.batch, shape), inputs)

    def launch(self, step: PreparedStep) -> torch.Tensor:  # [R, hidden]
        rows = step.inputs.tokens.shape[0]
        entry = self.cache.get(step.shape, lambda: self._build(step.shape, step.packed))
        entry.inputs.load(step.inputs, step.packed, self.trash_slot)
        if entry.graph is None:
            static = entry.inputs
            hidden = self.forward(static.tokens, static.positions, static.write_slots, step.packed)
            return hidden[:rows]
        entry.graph.replay()
        assert entry.hidden is not None
        return entry.hidden[:rows].clone()  # the next replay overwrites the graph's output

    def _pack(self, batch: DecodeBatch, shape: DecodeShape) -> PackedDecode:
        return pack_decode(
            batch,
            shape.rows,
            block_rows=shape.block_rows,
            num_splits=shape.splits,
            page_size=self.page_size,
            device=self.device,
            num_groups=shape.groups,
            num_work=shape.work,
            suffix_capacity=shape.suffix,
            prompt_capacity=shape.prompt,
        )

    def _build(self, shape: DecodeShape, packed: PackedDecode) -> _Entry:
        def zeros() -> torch.Tensor:
            return torch.zeros(shape.rows, dtype=torch.int64, device=self.device)

        static = PackedDecode(
            **{
                f.name: getattr(packed, f.name).clone()
                if isinstance(getattr(packed, f.name), torch.Tensor)
                else getattr(packed, f.name)
                for f in fields(PackedDecode)
            }
        )
        inputs = StaticDecodeInputs(zeros(), zeros(), zeros(), static)
        return self._capture(inputs) if self.cache.use_graphs else _Entry(inputs, None, None)

    def _capture(self, inputs: StaticDecodeInputs) -> _Entry:
        def run() -> torch.Tensor:
            return self.forward(inputs.tokens, inputs.positions, inputs.write_slots, inputs.packed)

        # The warm-up writes the trash slot only: inputs are still all padding here.
        inputs.write_slots.fill_(self.trash_slot)
        graph, hidden = self.cache.capture(run)
        return _Entry(inputs, graph, hidden)
