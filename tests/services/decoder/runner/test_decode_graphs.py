"""Decode buckets: shapes round up so few graphs serve every batch, and every batch fits; the
step's attention metadata goes through the backend's hooks into the bucket's buffers."""

from __future__ import annotations

import math

import torch

from tests.kernels.attention.cases import uniform_batch
from tests.services.decoder.runner.static_attention import StaticDecode, StaticTorchAttention
from widebeam.kernels.attention.buckets import DecodeCapacity
from widebeam.kernels.attention.metadata import AttentionLayout
from widebeam.services.decoder.runner.decode_graphs import DecodeGraphs, row_bucket
from widebeam.services.decoder.runner.step_inputs import DecodeInputs

LAYOUT = AttentionLayout(
    q_heads=4, kv_heads=2, head_dim=8, q_dtype=torch.float32, kv_dtype=torch.float32,
    scale=1 / math.sqrt(8), device=torch.device("cpu"),
)  # fmt: skip


def test_row_buckets_are_monotone_and_cover() -> None:
    last = 0
    for rows in range(1, 6000, 7):
        bucket = row_bucket(rows)
        assert bucket >= rows and bucket >= last
        last = bucket
    assert row_bucket(5000) == 5120  # wide beams waste at most 512 rows
    assert row_bucket(3) == 8 and row_bucket(300) == 512


def _inputs(rows: list[int], prompt: int, suffix: int) -> DecodeInputs:
    batch = uniform_batch(rows, prompt, suffix)
    total = sum(rows)
    return DecodeInputs(
        torch.arange(1, total + 1),
        torch.full((total,), prompt + suffix),
        torch.arange(total),
        batch,
    )


def test_eager_buckets_pad_rows_and_reuse_buffers() -> None:
    """The padded eager mode (what a graph replays): padding rows carry token 0 and write the
    trash slot, the backend's static metadata marks them as padding, and a bucket's buffers
    are reused."""
    seen: list[tuple[torch.Tensor, ...]] = []
    statics: list[object] = []

    def forward(
        tokens: torch.Tensor,  # [R] int64
        positions: torch.Tensor,  # [R] int64
        write_slots: torch.Tensor,  # [R] int64
        metadata: object,  # the backend's static buffers of the bucket
    ) -> torch.Tensor:  # [R, 2] "hidden"
        assert isinstance(metadata, StaticDecode)
        statics.append(metadata)
        seen.append((tokens.clone(), positions.clone(), write_slots.clone(), metadata.row_group))
        return torch.stack((tokens, write_slots), 1).float()

    backend = StaticTorchAttention()
    graphs = DecodeGraphs(
        forward, backend, LAYOUT, trash_slot=999, device=torch.device("cpu"), use_graphs=False
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
    assert statics[1] is statics[0]  # the step's metadata was copied into the bucket's buffers
    assert seen[-1][3].tolist() == [0, 0, 0, 0, 1, -1, -1, -1]
    graphs.launch(graphs.prepare(_inputs([20], prompt=30, suffix=2)))  # 32 rows: a new one
    assert len(graphs.cache.entries) == 2
    assert seen[-1][0].shape == (32,)
    assert backend.calls["init_decode_capture"] == 2  # once per bucket
    assert backend.calls["prepare_decode_replay"] == 3  # once per step
    assert backend.calls["prepare_decode(bucket)"] == 3 and backend.calls["prepare_decode"] == 0


class ListingAttention(StaticTorchAttention):
    """The stand-in with a start-up list: two attention buckets per row bucket."""

    def decode_buckets(self, rows: int, layout: AttentionLayout) -> tuple[DecodeCapacity, ...]:
        return (DecodeCapacity(2, 4, 32, 8), DecodeCapacity(4, 8, 64, 8))


def test_listed_buckets_are_built_before_any_step_and_serve_it() -> None:
    def forward(
        tokens: torch.Tensor,  # [R] int64
        positions: torch.Tensor,  # [R] int64
        write_slots: torch.Tensor,  # [R] int64
        metadata: object,  # the backend's static buffers of the bucket
    ) -> torch.Tensor:  # [R, 2] "hidden": token and its row's group
        assert isinstance(metadata, StaticDecode)
        return torch.stack((tokens, metadata.row_group), 1).float()

    backend = ListingAttention()
    graphs = DecodeGraphs(
        forward, backend, LAYOUT, trash_slot=999, device=torch.device("cpu"), use_graphs=False
    )
    assert graphs.capture_buckets(5) == 2  # the row bucket of 5 rows is 8
    assert graphs.capture_buckets(8) == 0  # built already
    assert backend.calls["init_decode_capture"] == 2
    first = graphs.launch(graphs.prepare(_inputs([3, 2], prompt=32, suffix=2)))
    second = graphs.launch(graphs.prepare(_inputs([1, 1, 6], prompt=50, suffix=1)))
    assert backend.calls["init_decode_capture"] == 2  # both steps in listed buckets
    assert first[:, 1].tolist() == [0, 0, 0, 1, 1]  # the step's metadata, not the empty one's
    assert second[:, 0].tolist() == list(range(1, 9)) and second[:, 1].tolist() == [0, 1] + [2] * 6
    graphs.launch(graphs.prepare(_inputs([1, 1, 1], prompt=200, suffix=2)))  # not listed
    assert backend.calls["init_decode_capture"] == 3
