"""Prefill buckets: token counts round up, the padding is one extra segment writing the trash
slot, the step's attention metadata goes through the backend's hooks, and each bucket's
buffers are reused."""

from __future__ import annotations

import itertools
import math
import random

import torch

from tests.services.decoder.runner.static_attention import StaticPrefill, StaticTorchAttention
from widebeam.kernels.attention.metadata import AttentionLayout
from widebeam.services.decoder.runner.prefill_graphs import (
    MIN_PROMPTS,
    TOKEN_STEP,
    PrefillGraphs,
    fits_graph,
    graph_sized_groups,
    largest_bucket,
    padded_segments,
    prefill_shape,
    prompt_capacity,
)

LAYOUT = AttentionLayout(
    q_heads=4, kv_heads=2, head_dim=8, q_dtype=torch.float32, kv_dtype=torch.float32,
    scale=1 / math.sqrt(8), device=torch.device("cpu"),
)  # fmt: skip


def test_shapes_hold_the_batch_and_its_padding_segment() -> None:
    for lengths in ([1], [1000], [301] * 27, [256], [5000], [7, 9, 1]):
        shape = prefill_shape(lengths, lambda tokens, prompts: (tokens, prompts))
        assert shape.tokens >= sum(lengths) and shape.tokens % TOKEN_STEP == 0
        assert shape.prompts > len(lengths)  # room for the padding segment
        assert shape.attention == (shape.tokens, shape.prompts)  # the backend's part of the key
        cu = padded_segments(lengths, shape.tokens)
        assert cu[-1] == shape.tokens and len(cu) - 1 <= shape.prompts
    one = prefill_shape([1000], lambda tokens, prompts: None)
    assert one == prefill_shape([900], lambda tokens, prompts: None)  # one graph serves both
    assert padded_segments([256], 256) == (0, 256)  # no padding segment when the batch fits


def test_eager_bucket_pads_tokens_and_reuses_buffers() -> None:
    seen: list[tuple[torch.Tensor, ...]] = []

    def forward(
        ids: torch.Tensor,  # [T] int64
        positions: torch.Tensor,  # [T] int64
        write_slots: torch.Tensor,  # [T] int64
        metadata: object,  # the backend's static buffers of the bucket
        last: torch.Tensor,  # [P] int64
    ) -> torch.Tensor:  # [P, 2] "hidden"
        assert isinstance(metadata, StaticPrefill)
        seen.append(tuple(t.clone() for t in (ids, positions, write_slots, metadata.segment, last)))
        return torch.stack((ids, positions), 1)[last].float()

    backend = StaticTorchAttention()
    graphs = PrefillGraphs(forward, backend, LAYOUT, trash_slot=999, device=torch.device("cpu"),
                           use_graphs=False)  # fmt: skip
    prompts = [(11, 12, 13), (21, 22)]
    slots = [torch.tensor([5, 6, 7]), torch.tensor([40, 41])]
    hidden = graphs.run(prompts, slots)
    assert hidden.tolist() == [[13.0, 2.0], [22.0, 1.0]]  # each prompt's last token
    ids, positions, writes, segment, last = seen[-1]
    assert ids.shape == (TOKEN_STEP,) and ids[:5].tolist() == [11, 12, 13, 21, 22]
    assert not ids[5:].any() and not positions[5:].any()
    assert positions[:5].tolist() == [0, 1, 2, 0, 1]
    assert writes[:5].tolist() == [5, 6, 7, 40, 41] and (writes[5:] == 999).all()
    assert last.tolist() == [2, 4] + [0] * (MIN_PROMPTS - 2)  # room for 15 prompts
    assert segment[:5].tolist() == [0, 0, 0, 1, 1] and (segment[5:] == 2).all()  # padding: one
    graphs.run(
        [(1,) * 100, (2,) * 100], list(torch.arange(200).split(100))
    )  # same bucket: 256 tokens
    assert seen[-1][3][:200].tolist() == [0] * 100 + [1] * 100
    graphs.run(
        [(1,) * 150, (2,) * 150], list(torch.arange(300).split(150))
    )  # 512 tokens: a new one
    assert len(graphs.cache.entries) == 2 and seen[-1][0].shape == (512,)
    assert backend.calls["init_prefill_capture"] == 2  # once per bucket
    assert backend.calls["prepare_prefill_replay"] == 3  # once per batch
    graphs.run([(3,)] * 15, list(torch.arange(15).split(1)))  # 15 prompts: the 256 bucket's
    assert len(graphs.cache.entries) == 2 and seen[-1][4][:15].tolist() == list(range(15))
    # 16 prompts and the padding segment: more than 256 tokens hold, so the smallest bucket
    # that holds 17 prompts (17 * TOKENS_PER_PROMPT = 544 tokens: 768, room for 24)
    graphs.run([(3,)] * 16, list(torch.arange(16).split(1)))
    assert len(graphs.cache.entries) == 3 and seen[-1][0].shape == (768,)
    assert seen[-1][4].shape == (prompt_capacity(768),) == (24,)


def test_graph_sized_groups_fill_each_run_in_order() -> None:
    assert graph_sized_groups([301] * 12, 2048) == [(0, 6), (6, 12)]
    assert graph_sized_groups([2048, 1, 2047, 1], 2048) == [(0, 1), (1, 3), (3, 4)]
    assert graph_sized_groups([10, 20, 30], 60) == [(0, 3)]  # fits whole: one run
    assert graph_sized_groups([100, 2049], 2048) is None  # a prompt past the limit alone
    assert graph_sized_groups([], 2048) is None
    lengths = [7, 300, 1500, 260, 900, 1200, 33]
    groups = graph_sized_groups(lengths, 1600)
    assert groups is not None and groups[0][0] == 0 and groups[-1][1] == len(lengths)
    assert all(a < b for a, b in groups)
    assert all(prev[1] == nxt[0] for prev, nxt in itertools.pairwise(groups))  # consecutive
    assert all(sum(lengths[a:b]) <= 1600 for a, b in groups)
    # as few as the order allows: no two neighbours would fit together
    assert all(not fits_graph(lengths[a:d], 1600) for (a, _), (_, d) in itertools.pairwise(groups))
    # many short prompts: a run ends where its bucket's prompt capacity does, not its tokens
    short = graph_sized_groups([10] * 40, 512)  # 512 tokens hold 16 prompts, the padding's too
    assert short == [(0, 15), (15, 30), (30, 40)]


def test_a_batch_that_fits_a_graph_falls_in_a_start_up_bucket_that_holds_it() -> None:
    """However many prompts a batch has, its shape is its token bucket's: the one graph the
    start-up list captures for those tokens."""
    rng = random.Random(7)
    limit = 8192
    buckets = set(range(TOKEN_STEP, largest_bucket(limit) + 1, TOKEN_STEP))
    fitted = 0
    for _ in range(3000):
        count = rng.choice([1, 2, 15, 16, 17, 40, 100, 255, 300])
        lengths = [rng.randint(1, rng.choice([8, 64, 400, 3000])) for _ in range(count)]
        shape = prefill_shape(lengths, lambda tokens, prompts: (tokens, prompts))
        assert shape.tokens >= sum(lengths) and len(lengths) < shape.prompts  # + padding
        assert shape.prompts == prompt_capacity(shape.tokens)  # a function of the tokens alone
        if fits_graph(lengths, limit):
            fitted += 1
            assert shape.tokens in buckets
        else:
            assert sum(lengths) > limit or shape.tokens > largest_bucket(limit)
    assert fitted > 500  # the draw reaches both sides of the rule
    assert not fits_graph([1] * 300, 8192)  # 301 prompts: more than 8,192 tokens hold (256)
    assert fits_graph([30] * 255, 8192) and not fits_graph([30] * 256, 8192)
