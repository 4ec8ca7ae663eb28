"""Packed, device-resident decode metadata for the Triton cascade kernels.

`DecodeBatch` is a tuple of per-request groups: fine for the torch reference, which loops over
groups on the host, but a kernel needs flat, padded int32 tables it can index from any program.
`pack_decode` builds them once per step (every layer reuses the result). All shapes can be padded
to fixed capacities so the same buffers can later live inside a CUDA graph.

Prompt table: with `page_size == 1` entry `[g, i]` is the slot of prompt token i; with
`page_size == p > 1` it is the page holding prompt tokens `i*p .. i*p + p - 1` (slot =
page * p + offset). The engine's prompts start at a page boundary and fill their pages in order
(`kv.kv_cache.slots_of_pages`), so page tables are exact there; for arbitrary slot lists use 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from widebeam.kernels.attention.metadata import DecodeBatch


@dataclass(frozen=True)
class PackedDecode:
    """Decode metadata as flat int32 device tensors. R rows, G groups, B prefix work items."""

    row_group: torch.Tensor  # [R] int32, group of each row; -1 = padding row (output zeros)
    row_suffix_len: torch.Tensor  # [R] int32, valid entries of row_suffix_slots
    row_suffix_slots: torch.Tensor  # [R, S_cap] int32, slot of each generated token, oldest first
    group_row_start: torch.Tensor  # [G] int32, first row of the group
    group_num_rows: torch.Tensor  # [G] int32
    group_prompt_len: torch.Tensor  # [G] int32, prompt tokens (0 allowed)
    group_prompt_table: torch.Tensor  # [G, T_cap] int32, slot or page ids (see page_size)
    work_group: torch.Tensor  # [B] int32, group of each prefix work item; -1 = padding
    work_row_start: torch.Tensor  # [B] int32, first row of the item's block of block_rows rows
    page_size: int  # slots per prompt-table entry (1 = slot table)
    block_rows: int  # rows per prefix work item (the kernel's BLOCK_R)
    num_splits: int  # prompt split into this many chunks per work item (flash-decoding)

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
    num_splits: int = 1,
    page_size: int = 1,
    check_pages: bool = False,  # verify page alignment (synchronises with the device)
    device: torch.device | str | None = None,
    num_groups: int | None = None,  # pad G to this capacity
    num_work: int | None = None,  # pad B to this capacity
    suffix_capacity: int | None = None,  # pad S_cap
    prompt_capacity: int | None = None,  # pad T_cap (in table entries)
) -> PackedDecode:
    """Flatten `batch` for `num_rows` rows; rows outside every group become padding rows.

    Only host-known sizes are used (tensor shapes, group row ranges), so packing never waits for
    the device except with `check_pages`.
    """
    if block_rows <= 0 or num_splits <= 0 or page_size <= 0:
        raise ValueError("block_rows, num_splits and page_size must be positive")
    groups = batch.groups
    if device is None:
        device = groups[0].prompt_slots.device if groups else "cpu"
    lens = [int(g.prompt_slots.shape[0]) for g in groups]
    suffix_lens = [int(g.suffix_slots.shape[1]) for g in groups]
    entries = [-(-n // page_size) for n in lens]
    g_cap = num_groups if num_groups is not None else len(groups)
    t_cap = max([prompt_capacity or 0, *entries, 1])
    s_cap = max([suffix_capacity or 0, *suffix_lens, 1])
    if g_cap < len(groups):
        raise ValueError(f"{len(groups)} groups exceed the capacity {g_cap}")

    row_group = [-1] * num_rows
    row_suffix_len = [0] * num_rows
    work_group: list[int] = []
    work_row_start: list[int] = []
    for i, g in enumerate(groups):
        if g.row_start < 0 or g.row_start + g.num_rows > num_rows:
            raise ValueError(f"group {i} rows {g.row_start}+{g.num_rows} exceed {num_rows} rows")
        if g.suffix_slots.shape[0] != g.num_rows:
            raise ValueError(f"group {i}: suffix_slots has {g.suffix_slots.shape[0]} rows")
        row_group[g.row_start : g.row_start + g.num_rows] = [i] * g.num_rows
        row_suffix_len[g.row_start : g.row_start + g.num_rows] = [suffix_lens[i]] * g.num_rows
        for r in range(g.row_start, g.row_start + g.num_rows, block_rows):
            work_group.append(i)
            work_row_start.append(r)
    b_cap = num_work if num_work is not None else len(work_group)
    if b_cap < len(work_group):
        raise ValueError(f"{len(work_group)} work items exceed the capacity {b_cap}")
    work_group += [-1] * (b_cap - len(work_group))
    work_row_start += [0] * (b_cap - len(work_row_start))
    pad_g = [0] * (g_cap - len(groups))

    def ints(values: list[int]) -> torch.Tensor:
        host = torch.tensor(values, dtype=torch.int32)
        if torch.device(device).type == "cuda":  # pinned: the copy queues, the host moves on
            host = host.pin_memory()
        return host.to(device, non_blocking=True)

    table = torch.zeros((g_cap, t_cap), dtype=torch.int32, device=device)
    suffix = torch.zeros((num_rows, s_cap), dtype=torch.int32, device=device)
    for i, g in enumerate(groups):
        slots = g.prompt_slots.to(device)
        if page_size == 1:
            table[i, : lens[i]] = slots
        elif lens[i]:
            pages = torch.div(slots[::page_size], page_size, rounding_mode="floor")
            if check_pages:
                _check_pages(slots, pages, page_size)
            table[i, : entries[i]] = pages
        suffix[g.row_start : g.row_start + g.num_rows, : suffix_lens[i]] = g.suffix_slots
    return PackedDecode(
        row_group=ints(row_group),
        row_suffix_len=ints(row_suffix_len),
        row_suffix_slots=suffix,
        group_row_start=ints([g.row_start for g in groups] + pad_g),
        group_num_rows=ints([g.num_rows for g in groups] + pad_g),
        group_prompt_len=ints(lens + pad_g),
        group_prompt_table=table,
        work_group=ints(work_group),
        work_row_start=ints(work_row_start),
        page_size=page_size,
        block_rows=block_rows,
        num_splits=num_splits,
    )
