"""Beams that share generated tokens: which rows read which shared suffix, once per step.

A wide beam's rows point at the same cache slot wherever they descend from the same beam
(`bench/suffix_sharing.py` counts how few of the (row, position) pairs are distinct). The
suffix kernel reads each row's suffix on its own; with a plan, the part of every row's suffix
older than its last few tokens is read once per *ancestor* instead: rows are grouped by the
slot they hold at the last shared depth (a slot belongs to one node of one request's beam tree,
so equal slots mean equal paths up to there), and `triton_cascade`'s shared-suffix kernel runs
each group's queries together against that path, like the prefix kernel does for a prompt.

The split depth is a function of the row's suffix length only (`SplitRule.shared_length`),
so every row of a request splits at the same depth, and the kernels recompute it from
`row_suffix_len` with the plan's rule as compile-time constants. Plans are built from device
tensors with fixed-size torch operations (no host read), so a CUDA graph's buffers take any
batch of the same capacities.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

MIN_SUFFIX_CAPACITY = 16  # shorter suffix buckets (a recommendation's SID path) get no plan
NO_ANCESTOR = torch.iinfo(torch.int32).max  # the sort key of rows without a shared part
ITEM_ROWS = 16  # rows per shared-suffix work item: M = 16 × the padded GQA group >= 16


@dataclass(frozen=True)
class SplitRule:
    """Where a row's suffix splits: its newest `private_min` .. private_min + align - 1 tokens
    are read by the row alone, the older ones (a multiple of `align`) through its ancestor
    group. A longer private tail means fewer, larger groups (more sharing) but more reads per
    row; the kernels take both numbers as compile-time constants."""

    private_min: int = 8
    align: int = 8

    def __post_init__(self) -> None:
        if self.private_min < 1 or self.align < 1:
            raise ValueError(f"split rule {self} needs private_min >= 1 and align >= 1")

    @property
    def longest_private(self) -> int:
        """The most tokens a row reads alone (with or without a shared part)."""
        return self.private_min + self.align - 1

    def shared_length(self, suffix_len: torch.Tensor) -> torch.Tensor:
        """Generated tokens of a row's suffix read through its ancestor group (0: none)."""
        return ((suffix_len - self.private_min).clamp(min=0) // self.align) * self.align


DEFAULT_SPLIT = SplitRule()


@dataclass(frozen=True)
class SuffixTreePlan:
    """Rows sorted by ancestor, and the work items of the shared-suffix kernel: each item is up
    to `block_rows` consecutive sorted rows of one ancestor group. R rows, fixed shapes."""

    order: torch.Tensor  # [R] int32, row at each sorted position
    key: torch.Tensor  # [R] int32, sorted ancestor slots; NO_ANCESTOR = row has no shared part
    items: torch.Tensor  # [R] int32, first sorted position of each item (num_items of them)
    num_items: torch.Tensor  # [1] int32
    block_rows: int
    rule: SplitRule = DEFAULT_SPLIT

    def clone(self) -> SuffixTreePlan:
        """Buffers of the same shapes (a CUDA graph's static copy)."""
        return SuffixTreePlan(
            self.order.clone(), self.key.clone(), self.items.clone(), self.num_items.clone(),
            self.block_rows, self.rule,
        )  # fmt: skip

    def replay_pairs(
        self, other: SuffixTreePlan
    ) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
        """These tensors and `other`'s, in order: what a replay copies `other` into (the
        backend queues all of a step's copies at once)."""
        if (other.block_rows, other.rule) != (self.block_rows, self.rule):
            raise ValueError(f"plans of different items or split rules: {other} and {self}")
        mine = (self.order, self.key, self.items, self.num_items)
        return mine, (other.order, other.key, other.items, other.num_items)


def plan_suffix_tree(
    suffix_slots: torch.Tensor,  # [R, S_cap] int32, oldest first
    suffix_len: torch.Tensor,  # [R] int32, valid entries (0 for padding rows)
    block_rows: int,
    rule: SplitRule = DEFAULT_SPLIT,
) -> SuffixTreePlan:
    """Group rows by their slot at the last shared depth. Device work only."""
    rows = suffix_slots.shape[0]
    device = suffix_slots.device
    shared = rule.shared_length(suffix_len)
    last = (shared.long() - 1).clamp(min=0)  # [R]
    ancestor = suffix_slots.gather(1, last[:, None]).squeeze(1)  # [R] int32
    key = torch.where(shared > 0, ancestor, torch.full_like(ancestor, NO_ANCESTOR))
    key, order = torch.sort(key, stable=True)
    position = torch.arange(rows, device=device)
    starts = torch.ones(rows, dtype=torch.bool, device=device)
    starts[1:] = key[1:] != key[:-1]
    group_start = torch.where(starts, position, 0).cummax(0).values
    first = ((position - group_start) % block_rows == 0) & (key != NO_ANCESTOR)
    index = torch.where(first, first.cumsum(0) - 1, rows)  # non-items go to a spare entry
    items = torch.zeros(rows + 1, dtype=torch.int32, device=device)
    items.scatter_(0, index, position.to(torch.int32))
    num_items = first.sum(dtype=torch.int32).reshape(1)
    return SuffixTreePlan(order.to(torch.int32), key, items[:rows], num_items, block_rows, rule)
