"""The Triton backend's decode replay: one multi-tensor copy of a step's packed metadata into a
bucket's static buffers leaves them holding exactly the step's metadata (what the per-field
copies before it left there), in the same storage."""

from __future__ import annotations

import math
from dataclasses import fields, replace

import pytest
import torch

from widebeam.kernels.attention.metadata import AttentionLayout, DecodeBatch, DecodeGroup
from widebeam.kernels.attention.packed import PackedDecode
from widebeam.kernels.attention.suffix_tree import SuffixTreePlan
from widebeam.kernels.attention.triton_backend import (
    DECODE_TENSOR_FIELDS,
    TritonAttention,
    TritonDecodeBucket,
)

CPU = torch.device("cpu")
PAGE = 4
ROWS = 64  # the bucket's rows
LAYOUT = replace(
    AttentionLayout(4, 2, 32, torch.float32, torch.float32, 1 / math.sqrt(32), CPU),
    cache_slots=4096,
)


def _batch(gen: torch.Generator, suffix: int) -> DecodeBatch:
    """Random requests in up to ROWS rows: ragged row counts, page-aligned prompts, random
    suffix slots (what a beam step's re-parenting gives), some padding rows at the end."""
    groups, row = [], 0
    pages = torch.randperm(LAYOUT.cache_slots // PAGE, generator=gen)
    while row < ROWS - 4:
        rows = int(torch.randint(1, min(24, ROWS - row), (1,), generator=gen))
        prompt = int(torch.randint(0, 60, (1,), generator=gen))
        first, pages = pages[: -(-prompt // PAGE)], pages[-(-prompt // PAGE) :]
        prompt_slots = (first[:, None] * PAGE + torch.arange(PAGE)).reshape(-1)[:prompt]
        suffix_slots = torch.randint(0, LAYOUT.cache_slots, (rows, suffix), generator=gen)
        groups.append(DecodeGroup(row, rows, prompt_slots, suffix_slots))
        row += rows
    return DecodeBatch(tuple(groups))


def _on(group: DecodeGroup, device: torch.device) -> DecodeGroup:
    prompt, suffix = group.prompt_slots.to(device), group.suffix_slots.to(device)
    return DecodeGroup(group.row_start, group.num_rows, prompt, suffix)


def _bucket(suffix: int) -> TritonDecodeBucket:
    # Capacities every _batch fits: a group and a work item per row, every page of the cache.
    return TritonDecodeBucket(
        groups=ROWS, work=ROWS, suffix=suffix, table=LAYOUT.cache_slots // PAGE, block_rows=8,
        splits=2,
    )  # fmt: skip


def _steps(backend: TritonAttention, suffix: int, count: int, seed: int) -> list[PackedDecode]:
    gen = torch.Generator().manual_seed(seed)
    bucket = _bucket(suffix)
    return [backend.prepare_decode(_batch(gen, suffix), ROWS, LAYOUT, bucket) for _ in range(count)]


def _tensors(packed: PackedDecode) -> dict[str, torch.Tensor]:
    """Every tensor of the metadata, the plan's included, by name."""
    out = {
        f.name: getattr(packed, f.name)
        for f in fields(packed)
        if isinstance(getattr(packed, f.name), torch.Tensor)
    }
    if packed.tree is not None:
        tree = packed.tree
        out |= {"order": tree.order, "key": tree.key, "items": tree.items}
        out["num_items"] = tree.num_items
    return out


def _old_static(metadata: PackedDecode) -> PackedDecode:
    """A second set of static buffers, a clone of each field, for the per-field replay."""
    return PackedDecode(
        **{
            f.name: getattr(metadata, f.name).clone()
            if isinstance(getattr(metadata, f.name), torch.Tensor | SuffixTreePlan)
            else getattr(metadata, f.name)
            for f in fields(PackedDecode)
        }
    )


def _old_replay(static: PackedDecode, metadata: PackedDecode) -> None:
    """The replay as it was: one copy per tensor, the plan's four included."""
    for name, tensor in _tensors(metadata).items():
        _tensors(static)[name].copy_(tensor)


def _assert_same(got: PackedDecode, want: PackedDecode) -> None:
    mine, theirs = _tensors(got), _tensors(want)
    assert mine.keys() == theirs.keys()
    for name, tensor in mine.items():
        assert tensor.dtype == theirs[name].dtype, name
        assert torch.equal(tensor, theirs[name]), name


def test_the_replay_copies_every_tensor_field() -> None:
    (metadata,) = _steps(TritonAttention(page_size=PAGE), 8, 1, seed=0)
    tensors = [
        f.name for f in fields(metadata) if isinstance(getattr(metadata, f.name), torch.Tensor)
    ]
    assert list(DECODE_TENSOR_FIELDS) == tensors


@pytest.mark.parametrize("suffix", [8, 16])
def test_a_replay_leaves_exactly_the_steps_metadata(suffix: int) -> None:
    """Random steps of one bucket replayed in turn into one bucket's buffers: each leaves what
    the step's metadata holds and what the per-field copies left, in the same storage."""
    backend = TritonAttention(page_size=PAGE)
    steps = _steps(backend, suffix, 6, seed=100 + suffix)
    static = backend.init_decode_capture(steps[0], LAYOUT)
    old = _old_static(steps[0])
    pointers = {name: t.data_ptr() for name, t in _tensors(static).items()}
    for step in steps[1:]:
        assert not torch.equal(step.row_group, steps[0].row_group)  # other batches
        backend.prepare_decode_replay(static, step)
        _old_replay(old, step)
        _assert_same(static, step)
        _assert_same(static, old)
        # a captured graph reads these addresses: a replay writes into them, never moves them
        assert {name: t.data_ptr() for name, t in _tensors(static).items()} == pointers


def test_a_replay_refuses_another_plan() -> None:
    backend = TritonAttention(page_size=PAGE)
    (metadata,) = _steps(backend, 16, 1, seed=3)
    static = backend.init_decode_capture(metadata, LAYOUT)
    assert metadata.tree is not None
    other = replace(metadata, tree=replace(metadata.tree, block_rows=metadata.tree.block_rows * 2))
    with pytest.raises(ValueError, match="plans of different items"):
        backend.prepare_decode_replay(static, other)
    with pytest.raises(ValueError, match="differ in the plan"):
        backend.prepare_decode_replay(static, replace(metadata, tree=None))
    with pytest.raises(TypeError):
        backend.prepare_decode_replay(static, object())


def test_the_replayed_buffers_decode_what_the_step_decodes(kernel_device: torch.device) -> None:
    """The eager padded path (graphs off) reads the static views: the same output, bit for
    bit, as the step's own packed metadata."""
    backend = TritonAttention(page_size=PAGE)
    layout = replace(LAYOUT, device=kernel_device)
    gen = torch.Generator().manual_seed(11)
    bucket = _bucket(8)
    batches = [_batch(gen, 8) for _ in range(2)]
    moved = [DecodeBatch(tuple(_on(g, kernel_device) for g in b.groups)) for b in batches]
    first, second = (backend.prepare_decode(b, ROWS, layout, bucket) for b in moved)
    static = backend.init_decode_capture(first, layout)
    backend.prepare_decode_replay(static, second)
    q = torch.randn(ROWS, 4, 32, generator=gen).to(kernel_device)
    k, v = (torch.randn(LAYOUT.cache_slots, 2, 32, generator=gen).to(kernel_device) for _ in "kv")
    got = backend.decode(q, k, v, static, 0.2)
    assert torch.equal(got, backend.decode(q, k, v, second, 0.2))
