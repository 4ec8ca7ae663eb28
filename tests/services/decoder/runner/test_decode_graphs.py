"""Decode buckets: shapes round up so few graphs serve every batch, and every batch fits."""

from __future__ import annotations

import torch

from widebeam.kernels.attention.metadata import DecodeBatch, DecodeGroup
from widebeam.services.decoder.runner.decode_graphs import decode_shape, row_bucket


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
