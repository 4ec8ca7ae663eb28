"""Beams that share generated tokens: which rows read which shared suffix, once per step.

A wide beam's rows point at the same cache slot wherever they descend from the same beam
(W1 at 5,000 rows and 64 tokens: 4% of the (row, position) pairs are distinct slots). The
suffix kernel reads each row's suffix on its own; with a plan, the part of every row's suffix
older than its last few tokens is read once per *ancestor* instead: rows are grouped by the
slot they hold at the last shared depth (a slot belongs to one node of one request's beam tree,
so equal slots mean equal paths up to there), and `triton_cascade`'s shared-suffix kernel runs
each group's queries together against that path, like the prefix kernel does for a prompt.

The split depth is a function of the row's suffix length only (`shared_length`), so every row
of a request splits at the same depth, and the kernels recompute it from `row_suffix_len`: the
last PRIVATE_MIN..PRIVATE_MIN + ALIGN - 1 tokens stay private (one suffix tile of 16), the rest
is shared. Plans are built from device tensors with fixed-size torch operations (no host
read), so a CUDA graph's buffers take any batch of the same capacities.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

PRIVATE_MIN = 8  # generated tokens each row always reads on its own (the newest)
ALIGN = 8  # the shared depth moves in steps of this many tokens
MIN_SUFFIX_CAPACITY = PRIVATE_MIN + ALIGN  # shorter suffix buckets never share: no plan
NO_ANCESTOR = torch.iinfo(torch.int32).max  # the sort key of rows without a shared part
ITEM_ROWS = 16  # rows per shared-suffix work item: M = 16 × the padded GQA group >= 16


def shared_length(suffix_len: torch.Tensor) -> torch.Tensor:
    """Generated tokens of a row's suffix read through its ancestor group (0: none)."""
    return ((suffix_len - PRIVATE_MIN).clamp(min=0) // ALIGN) * ALIGN


@dataclass(frozen=True)
class SuffixTreePlan:
    """Rows sorted by ancestor, and the work items of the shared-suffix kernel: each item is up
    to `block_rows` consecutive sorted rows of one ancestor group. R rows, fixed shapes."""

    order: torch.Tensor  # [R] int32, row at each sorted position
    key: torch.Tensor  # [R] int32, sorted ancestor slots; NO_ANCESTOR = row has no shared part
    items: torch.Tensor  # [R] int32, first sorted position of each item (num_items of them)
    num_items: torch.Tensor  # [1] int32
    block_rows: int

    def clone(self) -> SuffixTreePlan:
        """Buffers of the same shapes (a CUDA graph's static copy)."""
        return SuffixTreePlan(
            self.order.clone(), self.key.clone(), self.items.clone(), self.num_items.clone(),
            self.block_rows,
        )  # fmt: skip

    def copy_from(self, other: SuffixTreePlan) -> None:
        """Queue copies of `other`'s tensors into these (before a replay)."""
        if other.block_rows != self.block_rows:
            raise ValueError(f"plans of {other.block_rows} and {self.block_rows} rows per item")
        for mine, theirs in zip(
            (self.order, self.key, self.items, self.num_items),
            (other.order, other.key, other.items, other.num_items),
            strict=True,
        ):
            mine.copy_(theirs)


def plan_suffix_tree(
    suffix_slots: torch.Tensor,  # [R, S_cap] int32, oldest first
    suffix_len: torch.Tensor,  # [R] int32, valid entries (0 for padding rows)
    block_rows: int,
) -> SuffixTreePlan:
    """Group rows by their slot at the last shared depth. Device work only."""
    rows = suffix_slots.shape[0]
    device = suffix_slots.device
    shared = shared_length(suffix_len)
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
    return SuffixTreePlan(order.to(torch.int32), key, items[:rows], num_items, block_rows)
