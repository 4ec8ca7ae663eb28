"""Prefill batches at bucketed shapes, replayed from CUDA graphs.

An eager prefill launches ~15 kernels per layer from Python: at 1000 prompt tokens the host
needs longer to queue them than the device to run them. Here a batch's token count is rounded
up to a multiple of TOKEN_STEP, and the bucket's prompt capacity follows from its tokens
(`prompt_capacity`; the attention backend sizes its metadata for that: `prefill_bucket`), so
one graph per token bucket serves every batch that falls in it, however many prompts it holds:
the start-up list's (a batch of more prompts than its tokens' bucket holds moves to a larger
bucket, `bucket_tokens`). Padding tokens form one extra segment that attends only to itself and
writes its KV to the trash slot, so the real tokens see exactly what they would see eagerly.
Eager mode (`use_graphs=False`) runs the same padded shapes from the same static buffers
without capture (graph and eager give identical hidden states).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from typing import NamedTuple

import numpy as np
import torch

from widebeam.kernels.attention.metadata import PrefillBatch
from widebeam.services.decoder.runner.capture_counts import GraphKind
from widebeam.services.decoder.runner.graph_capture import BucketedForward

TOKEN_STEP = 256
# A bucket's prompt capacity: at least MIN_PROMPTS, and one prompt per TOKENS_PER_PROMPT of its
# tokens, so the larger buckets hold the many short prompts a busy server batches (W3's n = 50
# prompts are ~300 tokens: 27 of them fill 8,192). Each unused prompt costs the attention
# kernel one empty work item.
MIN_PROMPTS = 16
TOKENS_PER_PROMPT = 32
# A batch with cached prompt prefixes that fits a graph recomputes them in it when they are at
# most this many tokens: below it, the eager suffix-only prefill's launches cost more than the
# GEMMs it skips (docs/benchmarks.md, W2 with the cache on and off, measured up to 2,048).
# More cached tokens take the suffix-only prefill, graph-sized or not.
MAX_RECOMPUTED_PREFIX_TOKENS = 2048

# (ids [T], positions [T], write_slots [T], attention metadata, last [P]) -> [P, hidden]
# last tokens' states
PrefillForward = Callable[
    [torch.Tensor, torch.Tensor, torch.Tensor, object, torch.Tensor], torch.Tensor
]


def prefill_host_inputs(
    prompts: list[tuple[int, ...]], lengths: list[int], tokens: int, prompt_cap: int
) -> np.ndarray:  # [2 * tokens + prompt_cap] int64: ids | positions | last-token index
    """A prefill's token inputs, packed back to back and zero-padded to the given capacities,
    for one host-to-device copy."""
    total = sum(lengths)
    ints = np.zeros(2 * tokens + prompt_cap, dtype=np.int64)
    ints[:total] = np.fromiter((t for p in prompts for t in p), np.int64, total)
    ends = np.cumsum(lengths)
    ints[tokens : tokens + total] = np.arange(total) - np.repeat(ends - lengths, lengths)
    ints[2 * tokens : 2 * tokens + len(lengths)] = ends - 1
    return ints


def split_prefill_inputs(
    packed: torch.Tensor,  # [2 * tokens + prompt_cap] int64, `prefill_host_inputs`' layout
    tokens: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # views: ids, positions [tokens]; last
    """The three parts of a packed prefill input, on whichever device it was copied to."""
    return packed[:tokens], packed[tokens : 2 * tokens], packed[2 * tokens :]


def prompt_capacity(tokens: int) -> int:
    """Prompts, the padding segment included, that the bucket of `tokens` padded tokens
    holds."""
    return max(MIN_PROMPTS, tokens // TOKENS_PER_PROMPT)


def bucket_tokens(prompts: int, total: int) -> int:
    """The token bucket of a batch of `prompts` prompts, `total` tokens: `total` rounded up to
    a multiple of TOKEN_STEP, or the smallest bucket whose capacity holds the prompts and the
    padding segment where that is larger."""
    room = 0 if prompts < MIN_PROMPTS else (prompts + 1) * TOKENS_PER_PROMPT
    return max(TOKEN_STEP, math.ceil(max(total, room) / TOKEN_STEP) * TOKEN_STEP)


def largest_bucket(limit: int) -> int:
    """The largest token bucket of a prefill graph limit (the start-up list's last)."""
    return math.ceil(limit / TOKEN_STEP) * TOKEN_STEP


def fits_graph(lengths: list[int], limit: int) -> bool:
    """Whether a batch of prompts of these lengths runs in a prefill graph under `limit`
    (`max_prefill_graph_tokens`): at most `limit` tokens, in one of the limit's buckets."""
    return _fits(len(lengths), sum(lengths), limit)


def _fits(prompts: int, total: int, limit: int) -> bool:
    return 0 < total <= limit and bucket_tokens(prompts, total) <= largest_bucket(limit)


def graph_sized_groups(lengths: list[int], limit: int) -> list[tuple[int, int]] | None:
    """Consecutive runs [a, b) of the prompts, each fitting a prefill graph under `limit`
    (`fits_graph`), as few as the order allows (each run filled greedily); None when a prompt
    alone does not fit."""
    if not lengths or not all(_fits(1, n, limit) for n in lengths):
        return None
    groups, start, tokens = [], 0, 0
    for i, length in enumerate(lengths):
        if not _fits(i + 1 - start, tokens + length, limit):
            groups.append((start, i))
            start, tokens = i, 0
        tokens += length
    groups.append((start, len(lengths)))
    return groups


class PrefillShape(NamedTuple):
    tokens: int  # padded token count
    prompts: int  # prompt capacity, the padding segment included
    attention: Hashable  # the backend's metadata capacities (its prefill_bucket)


def prefill_shape(
    lengths: list[int],
    attention_bucket: Callable[[int, int], Hashable],  # (tokens, prompts) -> backend's bucket
) -> PrefillShape:
    """The batch's bucket: a function of its token bucket alone, so the start-up list's one
    graph per token bucket serves every batch."""
    tokens = bucket_tokens(len(lengths), sum(lengths))
    prompts = prompt_capacity(tokens)
    return PrefillShape(tokens, prompts, attention_bucket(tokens, prompts))


def padded_segments(lengths: list[int], tokens: int) -> tuple[int, ...]:
    """cu_seqlens of the prompts, plus the padding segment up to `tokens` when there is one."""
    cu = [0, *np.cumsum(lengths).tolist()]
    if tokens > cu[-1]:
        cu.append(tokens)
    return tuple(int(c) for c in cu)


class _Entry(NamedTuple):
    ids: torch.Tensor  # [T] int64
    positions: torch.Tensor  # [T] int64
    write_slots: torch.Tensor  # [T] int64
    metadata: object  # the backend's static attention buffers (init_prefill_capture)
    last: torch.Tensor  # [P] int64, each prompt's last token (padding: 0)
    graph: torch.cuda.CUDAGraph | None
    hidden: torch.Tensor | None  # [P, hidden] the graph's output (None in eager mode)


class PrefillGraphs(BucketedForward[PrefillForward, PrefillShape, _Entry]):
    """Bucketed prefill forward; `forward(ids, positions, write_slots, metadata, last)` runs
    the model and keeps each prompt's last token."""

    max_graphs = 16
    kind = GraphKind.PREFILL

    def run(
        self,
        prompts: list[tuple[int, ...]],
        prompt_slots: list[torch.Tensor],  # each [prompt_len] int64 on the device
    ) -> torch.Tensor:  # [len(prompts), hidden]
        lengths = [len(p) for p in prompts]
        shape = prefill_shape(
            lengths, lambda tokens, cap: self.backend.prefill_bucket(tokens, cap, self.layout)
        )
        batch = PrefillBatch(padded_segments(lengths, shape.tokens))
        metadata = self.backend.prepare_prefill(batch, self.layout, shape.attention)
        entry = self.cache.get(shape, lambda: self._build(shape, metadata))
        self._load(entry, shape, prompts, lengths, prompt_slots, metadata)
        if entry.graph is None:
            hidden = self.forward(
                entry.ids, entry.positions, entry.write_slots, entry.metadata, entry.last
            )
            return hidden[: len(prompts)]
        entry.graph.replay()
        assert entry.hidden is not None
        return entry.hidden[: len(prompts)].clone()  # the next replay overwrites it

    def _load(
        self,
        entry: _Entry,
        shape: PrefillShape,
        prompts: list[tuple[int, ...]],
        lengths: list[int],
        prompt_slots: list[torch.Tensor],
        metadata: object,  # prepare_prefill's, for this bucket
    ) -> None:
        total = sum(lengths)
        ints = prefill_host_inputs(prompts, lengths, shape.tokens, shape.prompts)
        host = _pinned(torch.from_numpy(ints), self.device)
        ids, positions, last = split_prefill_inputs(host, shape.tokens)
        entry.ids.copy_(ids, non_blocking=True)
        entry.positions.copy_(positions, non_blocking=True)
        entry.last.copy_(last, non_blocking=True)
        self.backend.prepare_prefill_replay(entry.metadata, metadata)
        entry.write_slots[:total].copy_(torch.cat(prompt_slots))
        entry.write_slots[total:].fill_(self.trash_slot)

    def _build(self, shape: PrefillShape, metadata: object) -> _Entry:
        def zeros(n: int) -> torch.Tensor:
            return torch.zeros(n, dtype=torch.int64, device=self.device)

        static = self.backend.init_prefill_capture(metadata, self.layout)
        slots = torch.full((shape.tokens,), self.trash_slot, device=self.device)
        entry = _Entry(
            zeros(shape.tokens), zeros(shape.tokens), slots, static, zeros(shape.prompts),
            None, None,
        )  # fmt: skip
        return self._capture(entry) if self.cache.use_graphs else entry

    def _capture(self, entry: _Entry) -> _Entry:
        def run() -> torch.Tensor:
            return self.forward(
                entry.ids, entry.positions, entry.write_slots, entry.metadata, entry.last
            )

        # The warm-up is harmless: every token writes the trash slot, and the backend's
        # buffers hold harmless metadata until the first replay's copy (init_prefill_capture).
        graph, hidden = self.cache.capture(run)
        return entry._replace(graph=graph, hidden=hidden)


def _pinned(host: torch.Tensor, device: torch.device) -> torch.Tensor:
    return host.pin_memory() if device.type == "cuda" else host
