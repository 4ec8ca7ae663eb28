"""Packed, device-resident decode metadata for the Triton cascade kernels.

`DecodeBatch` is a tuple of per-request groups: fine for the torch reference, which loops over
groups on the host, but a kernel needs flat, padded int32 tables it can index from any program.
`pack_decode` builds them once per step (every layer reuses the result). All shapes can be padded
to fixed capacities so the same buffers can later live inside a CUDA graph.

Prompt table: one flat list, group g's entries from `group_table_start[g]` on (its size does
not depend on how the prompts split into groups, so a CUDA graph's buffer fits any batch of as
many entries); with `page_size == 1` entry i of a group is the slot of its prompt token i, with
`page_size == p > 1` the page holding prompt tokens `i*p .. i*p + p - 1` (slot =
page * p + offset). The engine's prompts start at a page boundary and fill their pages in order
(`kv.kv_cache.slots_of_pages`), so page tables are exact there; for arbitrary slot lists use 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from widebeam.kernels.attention.metadata import DecodeBatch
from widebeam.kernels.attention.suffix_tree import (
    DEFAULT_SPLIT,
    MIN_SUFFIX_CAPACITY,
    SplitRule,
    SuffixTreePlan,
    plan_suffix_tree,
)


@dataclass(frozen=True)
class PackedDecode:
    """Decode metadata as flat int32 device tensors. R rows, G groups, B prefix work items."""

    row_group: torch.Tensor  # [R] int32, group of each row; -1 = padding row (output zeros)
    row_suffix_len: torch.Tensor  # [R] int32, valid entries of row_suffix_slots
    row_suffix_slots: torch.Tensor  # [R, S_cap] int32, slot of each generated token, oldest first
    group_row_start: torch.Tensor  # [G] int32, first row of the group
    group_num_rows: torch.Tensor  # [G] int32
    group_prompt_len: torch.Tensor  # [G] int32, prompt tokens (0 allowed)
    group_table_start: torch.Tensor  # [G] int32, the group's first prompt-table entry
    group_prompt_table: torch.Tensor  # [E_cap] int32, slot or page ids (see page_size)
    work_group: torch.Tensor  # [B] int32, group of each prefix work item; -1 = padding
    work_row_start: torch.Tensor  # [B] int32, first row of the item's block of block_rows rows
    live_splits: torch.Tensor  # [1] int32, chunks each prompt is split into, <= num_splits
    page_size: int  # slots per prompt-table entry (1 = slot table)
    block_rows: int  # rows per prefix work item (the kernel's BLOCK_R)
    # Prompt splits the kernels are launched for (flash-decoding); programs beyond
    # live_splits return at once, so one CUDA graph serves any split count up to it.
    num_splits: int
    # Rows grouped by shared generated tokens (`suffix_tree`); None: every row reads its whole
    # suffix alone (no plan asked for, or the suffix capacity too short to share).
    tree: SuffixTreePlan | None = None

    @property
    def num_rows(self) -> int:
        return self.row_group.shape[0]


def _check_pages(slots: torch.Tensor, pages: torch.Tensor, page_size: int) -> None:
    expanded = (pages[:, None] * page_size + torch.arange(page_size, device=pages.device)).view(-1)
    if not torch.equal(expanded[: slots.shape[0]], slots):
        raise ValueError(f"prompt slots are not whole pages of {page_size} starting at offset 0")


def pack_decode(
    batch: DecodeBatch,
    num_rows: int,
    *,
    block_rows: int = 16,
    num_splits: int = 1,  # prompt chunks this batch uses
    max_splits: int | None = None,  # launched for this many (default num_splits)
    page_size: int = 1,
    check_pages: bool = False,  # verify page alignment (synchronises with the device)
    device: torch.device | str | None = None,
    num_groups: int | None = None,  # pad G to this capacity
    num_work: int | None = None,  # pad B to this capacity
    suffix_capacity: int | None = None,  # pad S_cap
    table_capacity: int | None = None,  # pad E_cap (prompt-table entries, all groups)
    tree_rows: int = 0,  # > 0: plan shared suffixes, items of this many rows (`suffix_tree`)
    tree_split: SplitRule = DEFAULT_SPLIT,  # where the plan splits a row's suffix
) -> PackedDecode:
    """Flatten `batch` for `num_rows` rows; rows outside every group become padding rows.

    Only host-known sizes are used (tensor shapes, group row ranges), so packing never waits for
    the device except with `check_pages`. The cost in device operations does not grow with the
    number of groups: every int32 list travels in one host->device copy, the prompt table is one
    gather + copy, and suffix slots are copied once per run of back-to-back groups of equal
    suffix length (usually the whole batch).
    """
    if block_rows <= 0 or num_splits <= 0 or page_size <= 0 or tree_rows < 0:
        raise ValueError(
            "block_rows, num_splits and page_size must be positive, tree_rows not negative"
        )
    max_splits = num_splits if max_splits is None else max_splits
    if max_splits < num_splits:
        raise ValueError(f"{num_splits} splits exceed the launched {max_splits}")
    groups = batch.groups
    if device is None:
        device = groups[0].prompt_slots.device if groups else "cpu"
    device = torch.device(device)
    num_g = len(groups)
    lens = [int(g.prompt_slots.shape[0]) for g in groups]
    suffix_lens = [int(g.suffix_slots.shape[1]) for g in groups]
    entries = [-(-n // page_size) for n in lens]
    g_cap = num_groups if num_groups is not None else num_g
    e_cap = max(table_capacity or 0, sum(entries), 1)
    s_cap = max([suffix_capacity or 0, *suffix_lens, 1])
    if g_cap < num_g:
        raise ValueError(f"{num_g} groups exceed the capacity {g_cap}")
    for i, g in enumerate(groups):
        if g.row_start < 0 or g.row_start + g.num_rows > num_rows:
            raise ValueError(f"group {i} rows {g.row_start}+{g.num_rows} exceed {num_rows} rows")
        if g.suffix_slots.shape[0] != g.num_rows:
            raise ValueError(f"group {i}: suffix_slots has {g.suffix_slots.shape[0]} rows")

    # Host metadata (numpy, no per-row Python work).
    starts = np.array([g.row_start for g in groups], dtype=np.int64)
    counts = np.array([g.num_rows for g in groups], dtype=np.int64)
    gid = np.arange(num_g, dtype=np.int64)
    row_group = np.full(num_rows, -1, dtype=np.int32)
    row_suffix_len = np.zeros(num_rows, dtype=np.int32)
    rows = _ragged_arange(starts, counts)  # later groups win on overlap, as slice writes would
    row_group[rows] = np.repeat(gid, counts)
    row_suffix_len[rows] = np.repeat(np.array(suffix_lens, dtype=np.int64), counts)
    items = -(-counts // block_rows)
    num_items = int(items.sum())
    b_cap = num_work if num_work is not None else num_items
    if b_cap < num_items:
        raise ValueError(f"{num_items} work items exceed the capacity {b_cap}")
    work_group = np.full(b_cap, -1, dtype=np.int32)
    work_row_start = np.zeros(b_cap, dtype=np.int32)
    work_group[:num_items] = np.repeat(gid, items)
    work_row_start[:num_items] = np.repeat(starts, items) + block_rows * _ragged_arange(
        np.zeros(num_g, dtype=np.int64), items
    )
    entry_counts = np.array(entries, dtype=np.int64)
    table_start = np.cumsum(entry_counts) - entry_counts
    group_meta = np.zeros((4, g_cap), dtype=np.int32)
    group_meta[0, :num_g] = starts
    group_meta[1, :num_g] = counts
    group_meta[2, :num_g] = lens
    group_meta[3, :num_g] = table_start
    live = np.array([num_splits], dtype=np.int32)

    # One host buffer, one (pinned, queued) copy; the fields are contiguous 1-D slices of it.
    parts = [row_group, row_suffix_len, *group_meta, work_group, work_row_start, live]
    host = torch.from_numpy(np.concatenate([p.astype(np.int32, copy=False) for p in parts]))
    if device.type == "cuda":  # pinned: the copy queues, the host moves on
        host = host.pin_memory()
    meta = host.to(device, non_blocking=True)
    sizes = [p.shape[0] for p in parts]
    (
        d_row_group,
        d_row_suffix_len,
        d_group_row_start,
        d_group_num_rows,
        d_group_prompt_len,
        d_group_table_start,
        d_work_group,
        d_work_row_start,
        d_live_splits,
    ) = torch.split(meta, sizes)

    # Prompt table: one gather of every group's page starts, one division, one copy.
    table = torch.zeros(e_cap, dtype=torch.int32, device=device)
    if check_pages and page_size > 1:
        for i, g in enumerate(groups):
            if lens[i]:
                slots = g.prompt_slots.to(device)
                pages = torch.div(slots[::page_size], page_size, rounding_mode="floor")
                _check_pages(slots, pages, page_size)
    heads = [g.prompt_slots for i, g in enumerate(groups) if lens[i]]
    if page_size > 1:
        heads = [h[::page_size] for h in heads]  # first slot of each page
    heads = [h if h.device == device else h.to(device) for h in heads]
    if heads:
        pages = torch.cat(heads) if len(heads) > 1 else heads[0]
        if page_size > 1:
            pages = torch.div(pages, page_size, rounding_mode="floor")
        table[: pages.shape[0]] = pages.to(torch.int32)

    # Suffix slots: one copy per run of back-to-back groups with equal suffix length.
    suffix = torch.zeros((num_rows, s_cap), dtype=torch.int32, device=device)
    i = 0
    while i < num_g:
        j = i + 1
        end = groups[i].row_start + groups[i].num_rows
        while j < num_g and groups[j].row_start == end and suffix_lens[j] == suffix_lens[i]:
            end += groups[j].num_rows
            j += 1
        if suffix_lens[i] and end > groups[i].row_start:
            run = [g.suffix_slots for g in groups[i:j] if g.num_rows]
            run = [s if s.device == device else s.to(device) for s in run]
            slots = torch.cat(run) if len(run) > 1 else run[0]
            suffix[groups[i].row_start : end, : suffix_lens[i]] = slots
        i = j
    tree = None
    if tree_rows and s_cap >= MIN_SUFFIX_CAPACITY:  # a fixed choice per suffix bucket
        tree = plan_suffix_tree(suffix, d_row_suffix_len, tree_rows, tree_split)
    return PackedDecode(
        row_group=d_row_group,
        row_suffix_len=d_row_suffix_len,
        row_suffix_slots=suffix,
        group_row_start=d_group_row_start,
        group_num_rows=d_group_num_rows,
        group_prompt_len=d_group_prompt_len,
        group_table_start=d_group_table_start,
        group_prompt_table=table,
        work_group=d_work_group,
        work_row_start=d_work_row_start,
        live_splits=d_live_splits,
        page_size=page_size,
        block_rows=block_rows,
        num_splits=max_splits,
        tree=tree,
    )


def _ragged_arange(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Concatenation of `arange(starts[i], starts[i] + counts[i])` over i, as int64."""
    total = int(counts.sum())
    offsets = np.cumsum(counts) - counts  # where each range begins in the output
    return np.repeat(starts - offsets, counts) + np.arange(total, dtype=np.int64)
