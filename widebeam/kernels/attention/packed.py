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
from itertools import accumulate

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
    starts = [g.row_start for g in groups]
    counts = [g.num_rows for g in groups]
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
    items = [-(-n // block_rows) for n in counts]
    num_items = sum(items)
    b_cap = num_work if num_work is not None else num_items
    if b_cap < num_items:
        raise ValueError(f"{num_items} work items exceed the capacity {b_cap}")

    # One int32 host buffer (pinned on CUDA: the copy queues, the host moves on), written in
    # place; the fields are contiguous 1-D slices of it, and of its one device copy.
    sizes = (num_rows, num_rows, g_cap, g_cap, g_cap, g_cap, b_cap, b_cap, 1)
    host = torch.empty(sum(sizes), dtype=torch.int32, pin_memory=device.type == "cuda")
    _fill_host_meta(
        host.numpy(), sizes, starts, counts, lens, suffix_lens, entries, items, block_rows,
        num_splits,
    )  # fmt: skip
    meta = host.to(device, non_blocking=True)
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
    ) = meta.split_with_sizes(sizes)

    # Prompt table: one gather of every group's page starts, one division into the table.
    if check_pages and page_size > 1:
        for i, g in enumerate(groups):
            if lens[i]:
                slots = g.prompt_slots.to(device)
                pages = torch.div(slots[::page_size], page_size, rounding_mode="floor")
                _check_pages(slots, pages, page_size)
    table = torch.empty(e_cap, dtype=torch.int32, device=device)
    heads = [g.prompt_slots for i, g in enumerate(groups) if lens[i]]
    if page_size > 1:
        heads = [h[::page_size] for h in heads]  # first slot of each page
    heads = [h if h.device == device else h.to(device) for h in heads]
    filled = 0
    if heads:
        pages = torch.cat(heads) if len(heads) > 1 else heads[0]
        filled = pages.shape[0]
        if page_size > 1:  # computed in int64, stored as int32
            torch.div(pages, page_size, rounding_mode="floor", out=table[:filled])
        else:
            table[:filled] = pages
    table[filled:].zero_()

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


def _fill_host_meta(
    flat: np.ndarray,  # [sum(sizes)] int32, written whole
    sizes: tuple[int, ...],  # R, R, G_cap x 4, B_cap x 2, 1: `PackedDecode`'s int32 lists
    starts: list[int],  # per group: first row
    counts: list[int],  # rows
    lens: list[int],  # prompt tokens
    suffix_lens: list[int],  # generated tokens
    entries: list[int],  # prompt-table entries
    items: list[int],  # prefix work items
    block_rows: int,
    num_splits: int,
) -> None:
    """Write the host part of `pack_decode`'s metadata into `flat`: row, group and work-item
    lists back to back, padding rows and items -1 in their group lists, 0 elsewhere. Whole
    steps' rows in a few numpy calls (no per-row Python work)."""
    num_rows, g_cap, b_cap = sizes[0], sizes[2], sizes[6]
    num_g, num_items = len(starts), sum(items)
    row_group = flat[:num_rows]
    row_suffix_len = flat[num_rows : 2 * num_rows]
    group_meta = flat[2 * num_rows : 2 * num_rows + 4 * g_cap].reshape(4, g_cap)
    work_group = flat[2 * num_rows + 4 * g_cap :][:b_cap]
    work_row_start = flat[2 * num_rows + 4 * g_cap + b_cap :][:b_cap]
    flat.fill(0)
    row_group.fill(-1)
    work_group.fill(-1)
    flat[-1] = num_splits
    if not num_g:
        return
    gid = np.arange(num_g, dtype=np.int32)
    end = starts[0]
    contiguous = True  # the engine's batches: groups back to back, in row order
    for start, count in zip(starts, counts, strict=True):
        contiguous = contiguous and start == end
        end = start + count
    if contiguous:
        rows: slice | np.ndarray = slice(starts[0], end)
    else:  # later groups win on overlap, as slice writes would
        rows = _ragged_arange(np.array(starts, dtype=np.int64), np.array(counts, dtype=np.int64))
    row_group[rows] = gid.repeat(counts)
    row_suffix_len[rows] = np.array(suffix_lens, dtype=np.int32).repeat(counts)
    table_start = list(accumulate(entries, initial=0))[:-1]
    group_meta[:, :num_g] = (starts, counts, lens, table_start)
    # Item j of a group starts block_rows * j rows into it.
    item_offsets = list(accumulate(items, initial=0))[:-1]
    item_base = np.array(
        [start - block_rows * offset for start, offset in zip(starts, item_offsets, strict=True)],
        dtype=np.int64,
    )
    work_group[:num_items] = gid.repeat(items)
    work_row_start[:num_items] = item_base.repeat(items) + block_rows * np.arange(num_items)


def _ragged_arange(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Concatenation of `arange(starts[i], starts[i] + counts[i])` over i, as int64."""
    total = int(counts.sum())
    offsets = np.cumsum(counts) - counts  # where each range begins in the output
    return np.repeat(starts - offsets, counts) + np.arange(total, dtype=np.int64)
