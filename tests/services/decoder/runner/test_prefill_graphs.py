"""Prefill buckets: token counts round up, the padding is one extra segment writing the trash
slot, and each bucket's buffers are reused."""

from __future__ import annotations

import torch

from widebeam.kernels.attention.metadata import PackedPrefill
from widebeam.services.decoder.runner.prefill_graphs import (
    TOKEN_STEP,
    PrefillGraphs,
    prefill_shape,
)


def test_shapes_hold_the_batch_and_its_padding_segment() -> None:
    for lengths in ([1], [1000], [301] * 27, [256], [5000], [7, 9, 1]):
        shape = prefill_shape(lengths, 32)
        assert shape.tokens >= sum(lengths) and shape.tokens % TOKEN_STEP == 0
        assert shape.prompts > len(lengths)  # room for the padding segment
        blocks = sum(-(-n // 32) for n in [*lengths, shape.tokens - sum(lengths)])
        assert shape.work >= blocks
    assert prefill_shape([1000], 32) == prefill_shape([900], 32)  # one graph serves both


def test_eager_bucket_pads_tokens_and_reuses_buffers() -> None:
    seen: list[tuple[torch.Tensor, ...]] = []

    def forward(
        ids: torch.Tensor,
        positions: torch.Tensor,
        write_slots: torch.Tensor,
        packed: PackedPrefill,
        last: torch.Tensor,
    ) -> torch.Tensor:
        seen.append(tuple(t.clone() for t in (ids, positions, write_slots, packed.work, last)))
        return torch.stack((ids, positions), 1)[last].float()  # [P, 2] "hidden"

    graphs = PrefillGraphs(forward, 16, trash_slot=999, device=torch.device("cpu"),
                           use_graphs=False)  # fmt: skip
    prompts = [(11, 12, 13), (21, 22)]
    slots = [torch.tensor([5, 6, 7]), torch.tensor([40, 41])]
    hidden = graphs.run(prompts, slots)
    assert hidden.tolist() == [[13.0, 2.0], [22.0, 1.0]]  # each prompt's last token
    ids, positions, writes, work, last = seen[-1]
    assert ids.shape == (TOKEN_STEP,) and ids[:5].tolist() == [11, 12, 13, 21, 22]
    assert not ids[5:].any() and not positions[5:].any()
    assert positions[:5].tolist() == [0, 1, 2, 0, 1]
    assert writes[:5].tolist() == [5, 6, 7, 40, 41] and (writes[5:] == 999).all()
    assert last.tolist() == [2, 4, 0, 0]
    items = work[:, work[1] > 0].t().tolist()  # (segment start, end, first query) per block
    padding = [[5, TOKEN_STEP, q] for q in range(5, TOKEN_STEP, 16)]
    assert items == [[0, 3, 0], [3, 5, 3], *padding]
    assert (work[:, len(items) :] == 0).all()
    graphs.run(
        [(1,) * 100, (2,) * 100], list(torch.arange(200).split(100))
    )  # same bucket: 256 tokens
    graphs.run(
        [(1,) * 150, (2,) * 150], list(torch.arange(300).split(150))
    )  # 512 tokens: a new one
    assert len(graphs.cache.entries) == 2 and seen[-1][0].shape == (512,)
