"""pack_decode flattens the per-group metadata without losing or inventing anything."""

from __future__ import annotations

import pytest
import torch

from tests.kernels.attention.cases import DecodeCase, decode_case
from widebeam.kernels.attention.packed import pack_decode

GROUPS = [(3, 7, 2), (20, 1, 5), (1, 0, 3), (5, 40, 1)]


def _case(page_size: int = 1) -> DecodeCase:
    return decode_case(
        GROUPS, q_heads=2, kv_heads=1, dim=4, dtype=torch.float32,
        device=torch.device("cpu"), seed=0, pad_rows=2, page_size=page_size,
    )  # fmt: skip


def test_pack_matches_groups() -> None:
    case = _case()
    rows = case.q.shape[0]
    packed = pack_decode(case.batch, rows, block_rows=8, num_splits=2)
    assert packed.num_rows == rows and packed.num_splits == 2
    for t in (packed.row_group, packed.row_suffix_slots, packed.group_prompt_table):
        assert t.dtype == torch.int32
    expected_group = torch.full((rows,), -1, dtype=torch.int32)
    items = []
    for i, g in enumerate(case.batch.groups):
        rs = slice(g.row_start, g.row_start + g.num_rows)
        expected_group[rs] = i
        prompt_len, suffix_len = g.prompt_slots.shape[0], g.suffix_slots.shape[1]
        assert packed.group_row_start[i] == g.row_start
        assert packed.group_num_rows[i] == g.num_rows
        assert packed.group_prompt_len[i] == prompt_len
        assert torch.equal(packed.group_prompt_table[i, :prompt_len].long(), g.prompt_slots)
        assert (packed.row_suffix_len[rs] == suffix_len).all()
        assert torch.equal(packed.row_suffix_slots[rs, :suffix_len].long(), g.suffix_slots)
        items += [(i, r) for r in range(g.row_start, g.row_start + g.num_rows, 8)]
    assert torch.equal(packed.row_group, expected_group)
    assert (packed.row_suffix_len[~case.real_rows] == 0).all()
    got = list(zip(packed.work_group.tolist(), packed.work_row_start.tolist(), strict=True))
    assert got == items  # 20 rows in blocks of 8 -> 3 items, every other group 1


def test_pack_page_table_and_capacities() -> None:
    case = _case(page_size=4)
    rows = case.q.shape[0]
    packed = pack_decode(
        case.batch, rows, page_size=4, check_pages=True,
        num_groups=6, num_work=12, suffix_capacity=9, prompt_capacity=16,
    )  # fmt: skip
    assert packed.group_prompt_table.shape == (6, 16)
    assert packed.row_suffix_slots.shape == (rows, 9)
    assert packed.work_group.shape == (12,) and (packed.work_group[-12 + 7 :] == -1).all()
    assert (packed.group_num_rows[4:] == 0).all() and (packed.group_prompt_len[4:] == 0).all()
    for i, g in enumerate(case.batch.groups):
        n = g.prompt_slots.shape[0]
        pages = packed.group_prompt_table[i].long()
        slots = (pages[:, None] * 4 + torch.arange(4)).reshape(-1)[:n]
        assert torch.equal(slots, g.prompt_slots)


def test_pack_rejects_misaligned_pages_and_overflow() -> None:
    case = _case()  # scattered slots
    with pytest.raises(ValueError, match="whole pages"):
        pack_decode(case.batch, case.q.shape[0], page_size=4, check_pages=True)
    with pytest.raises(ValueError, match="exceed"):
        pack_decode(case.batch, 5)
    with pytest.raises(ValueError, match="capacity"):
        pack_decode(case.batch, case.q.shape[0], num_groups=2)
