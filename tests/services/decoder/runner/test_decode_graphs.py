"""Decode buckets: shapes round up so few graphs serve every batch, and every batch fits."""

from __future__ import annotations

import torch

from widebeam.kernels.attention.metadata import DecodeBatch, DecodeGroup
from widebeam.kernels.attention.packed import PackedDecode
from widebeam.services.decoder.runner.decode_graphs import DecodeGraphs, decode_shape, row_bucket
from widebeam.services.decoder.runner.step_inputs import DecodeInputs


def _batch(rows: list[int], prompt: int, suffix: int) -> DecodeBatch:
    groups, start = [], 0
    for i, n in enumerate(rows):
        prompt_slots = torch.arange(prompt) + 1000 * i
        groups.append(DecodeGroup(start, n, prompt_slots, torch.zeros(n, suffix, dtype=torch.long)))
        start += n
    return DecodeBatch(tuple(groups))


def test_row_buckets_are_monotone_and_cover() -> None:
    last = 0
    for rows in range(1, 6000, 7):
        bucket = row_bucket(rows)
        assert bucket >= rows and bucket >= last
        last = bucket
    assert row_bucket(5000) == 5120  # wide beams waste at most 512 rows
    assert row_bucket(3) == 8 and row_bucket(300) == 512


def test_shape_holds_the_batch() -> None:
    batch = _batch([5, 256, 1, 33], prompt=1000, suffix=3)
    shape = decode_shape(batch, 295, 16, lambda widest: 16, lambda work, longest: 2)
    assert shape.rows == 512 and shape.groups == 4
    assert shape.suffix == 8 and shape.prompt == 64  # 1024-token bucket in 16-slot pages
    items = sum(-(-g.num_rows // 16) for g in batch.groups)
    assert shape.work >= items
    # the same bucket for a neighbouring batch: one graph serves both
    other = decode_shape(
        _batch([7, 250, 2, 30], 900, 5), 289, 16, lambda widest: 16, lambda work, longest: 2
    )
    assert other == shape


def _inputs(rows: list[int], prompt: int, suffix: int) -> DecodeInputs:
    batch = _batch(rows, prompt, suffix)
    total = sum(rows)
    return DecodeInputs(
        torch.arange(1, total + 1),
        torch.full((total,), prompt + suffix),
        torch.arange(total),
        batch,
    )


def test_eager_buckets_pad_rows_and_reuse_buffers() -> None:
    """The padded eager mode (what a graph replays): padding rows carry token 0 and write the
    trash slot, packed metadata marks them as padding, and a bucket's buffers are reused."""
    seen: list[tuple[torch.Tensor, ...]] = []

    def forward(
        tokens: torch.Tensor,
        positions: torch.Tensor,
        write_slots: torch.Tensor,
        packed: PackedDecode,
    ) -> torch.Tensor:
        seen.append((tokens.clone(), positions.clone(), write_slots.clone(), packed.row_group))
        return torch.stack((tokens, write_slots), 1).float()  # [rows, 2] "hidden"

    graphs = DecodeGraphs(
        forward,
        lambda batch, rows: decode_shape(batch, rows, 16, lambda w: 16, lambda w, n: 1),
        page_size=16,
        trash_slot=999,
        device=torch.device("cpu"),
        use_graphs=False,
    )
    first = _inputs([3, 2], prompt=32, suffix=2)
    hidden = graphs.launch(graphs.prepare(first))
    assert hidden.shape == (5, 2) and hidden[:, 0].tolist() == [1, 2, 3, 4, 5]
    tokens, positions, writes, row_group = seen[-1]
    assert tokens.shape == (8,) and tokens[5:].tolist() == [0, 0, 0]
    assert positions[:5].tolist() == [34] * 5 and positions[5:].tolist() == [0, 0, 0]
    assert writes[:5].tolist() == [0, 1, 2, 3, 4] and writes[5:].tolist() == [999] * 3
    assert row_group.tolist() == [0, 0, 0, 1, 1, -1, -1, -1]
    graphs.launch(graphs.prepare(_inputs([4, 1], prompt=30, suffix=2)))  # same bucket
    graphs.launch(graphs.prepare(_inputs([20], prompt=30, suffix=2)))  # 32 rows: a new one
    assert len(graphs.cache.entries) == 2
    assert seen[-1][0].shape == (32,)
