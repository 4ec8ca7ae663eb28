"""pack_decode flattens the per-group metadata without losing or inventing anything."""

from __future__ import annotations

import random

import pytest
import torch

from tests.kernels.attention.cases import DecodeCase, decode_case
from widebeam.kernels.attention.metadata import DecodeBatch, DecodeGroup
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
        start = int(packed.group_table_start[i])
        table = packed.group_prompt_table[start : start + prompt_len]
        assert torch.equal(table.long(), g.prompt_slots)
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
        num_groups=6, num_work=12, suffix_capacity=9, table_capacity=64,
    )  # fmt: skip
    assert packed.group_prompt_table.shape == (64,)
    assert packed.row_suffix_slots.shape == (rows, 9)
    assert packed.work_group.shape == (12,) and (packed.work_group[-12 + 7 :] == -1).all()
    assert (packed.group_num_rows[4:] == 0).all() and (packed.group_prompt_len[4:] == 0).all()
    for i, g in enumerate(case.batch.groups):
        n = g.prompt_slots.shape[0]
        start = int(packed.group_table_start[i])
        pages = packed.group_prompt_table[start : start + -(-n // 4)].long()
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
    with pytest.raises(ValueError, match="launched"):
        pack_decode(case.batch, case.q.shape[0], num_splits=3, max_splits=2)


def test_pack_launches_more_splits_than_the_batch_uses() -> None:
    case = _case()
    packed = pack_decode(case.batch, case.q.shape[0], num_splits=2, max_splits=8)
    assert packed.num_splits == 8 and packed.live_splits.tolist() == [2]


def _reference_pack(
    batch: DecodeBatch, num_rows: int, *, block_rows: int, page_size: int,
    num_groups: int | None, num_work: int | None, suffix_capacity: int | None,
    table_capacity: int | None,
) -> dict[str, torch.Tensor]:  # fmt: skip
    """Straightforward per-group packing (the pre-vectorisation pack_decode)."""
    groups = batch.groups
    lens = [g.prompt_slots.shape[0] for g in groups]
    entries = [-(-n // page_size) for n in lens]
    g_cap = len(groups) if num_groups is None else num_groups
    e_cap = max(table_capacity or 0, sum(entries), 1)
    s_cap = max([suffix_capacity or 0, *(g.suffix_slots.shape[1] for g in groups), 1])
    row_group, row_suffix_len = [-1] * num_rows, [0] * num_rows
    work: list[tuple[int, int]] = []
    table = torch.zeros(e_cap, dtype=torch.int32)
    starts: list[int] = []
    suffix = torch.zeros((num_rows, s_cap), dtype=torch.int32)
    for i, g in enumerate(groups):
        s = g.suffix_slots.shape[1]
        for r in range(g.row_start, g.row_start + g.num_rows):
            row_group[r], row_suffix_len[r] = i, s
            suffix[r, :s] = g.suffix_slots[r - g.row_start]
        work += [(i, r) for r in range(g.row_start, g.row_start + g.num_rows, block_rows)]
        starts.append(sum(entries[:i]))
        for e in range(entries[i]):
            table[starts[i] + e] = g.prompt_slots[e * page_size] // page_size
    b_cap = len(work) if num_work is None else num_work
    work += [(-1, 0)] * (b_cap - len(work))
    pad = [0] * (g_cap - len(groups))

    def ints(values: list[int]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.int32)

    return {
        "row_group": ints(row_group),
        "row_suffix_len": ints(row_suffix_len),
        "row_suffix_slots": suffix,
        "group_row_start": ints([g.row_start for g in groups] + pad),
        "group_num_rows": ints([g.num_rows for g in groups] + pad),
        "group_prompt_len": ints(lens + pad),
        "group_table_start": ints(starts + pad),
        "group_prompt_table": table,
        "work_group": ints([w[0] for w in work]),
        "work_row_start": ints([w[1] for w in work]),
    }


def _random_batch(gen: random.Random, page_size: int) -> tuple[DecodeBatch, int]:
    """Groups with ragged prompts (0, non-multiples of page_size), suffix lengths incl. 0 and a
    lockstep run of equal suffix lengths, sometimes padding rows between groups."""
    groups, row, next_page = [], 0, 0
    lockstep = gen.randint(0, 9)
    for _ in range(gen.randint(1, 7)):
        row += gen.choice([0, 0, 1, 3])  # padding rows not covered by any group
        num_rows = gen.choice([0, 1, 2, 5, 17, 33])
        prompt_len = gen.choice([0, 1, page_size, page_size + 1, 3 * page_size - 1, 40])
        suffix_len = lockstep if gen.random() < 0.6 else gen.randint(0, 9)
        pages = -(-prompt_len // page_size)
        prompt = torch.arange(next_page * page_size, next_page * page_size + prompt_len)
        next_page += pages + gen.randint(0, 3)
        suffix = torch.randint(0, 10_000, (num_rows, suffix_len), dtype=torch.int64)
        groups.append(DecodeGroup(row, num_rows, prompt, suffix))
        row += num_rows
    return DecodeBatch(tuple(groups)), row + gen.choice([0, 2])


@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("padded", [False, True])
def test_pack_matches_per_group_reference(page_size: int, padded: bool) -> None:
    gen = random.Random(page_size * 2 + padded)
    torch.manual_seed(page_size)
    for _ in range(40):
        batch, num_rows = _random_batch(gen, page_size)
        block_rows = gen.choice([1, 4, 16])
        caps: dict[str, int | None] = dict.fromkeys(
            ("num_groups", "num_work", "suffix_capacity", "table_capacity")
        )
        if padded:
            items = sum(-(-g.num_rows // block_rows) for g in batch.groups)
            caps = {
                "num_groups": len(batch.groups) + gen.randint(0, 4),
                "num_work": items + gen.randint(0, 5),
                "suffix_capacity": 16,
                "table_capacity": 64,
            }
        packed = pack_decode(
            batch, num_rows, block_rows=block_rows, page_size=page_size,
            check_pages=page_size > 1, **caps,
        )  # fmt: skip
        want = _reference_pack(batch, num_rows, block_rows=block_rows, page_size=page_size, **caps)
        for name, expected in want.items():
            got = getattr(packed, name)
            assert got.dtype == torch.int32 and got.is_contiguous(), name
            assert got.shape == expected.shape, name
            assert torch.equal(got, expected), name
            assert torch.equal(got.clone(), expected), name  # CUDA-graph buffers are clones


def _assert_matches_reference(batch: DecodeBatch, num_rows: int, **caps: int | None) -> None:
    packed = pack_decode(batch, num_rows, block_rows=4, page_size=1, **caps)  # type: ignore[arg-type]
    want = _reference_pack(
        batch, num_rows, block_rows=4, page_size=1,
        **dict.fromkeys(("num_groups", "num_work", "suffix_capacity", "table_capacity")) | caps,
    )  # fmt: skip
    for name, expected in want.items():
        got = getattr(packed, name)
        assert got.shape == expected.shape and torch.equal(got, expected), name
    assert packed.live_splits.tolist() == [1]


def test_pack_of_no_groups_is_all_padding() -> None:
    # what a CUDA-graph bucket is built from before any step (`capture_buckets`)
    empty = DecodeBatch(())
    _assert_matches_reference(empty, 8)
    _assert_matches_reference(
        empty, 8, num_groups=3, num_work=4, suffix_capacity=8, table_capacity=16
    )  # fmt: skip


def test_pack_of_overlapping_and_unordered_groups() -> None:
    # rows of a later group win where groups overlap, as the reference's row writes do
    def group(row_start: int, num_rows: int, suffix_len: int) -> DecodeGroup:
        suffix = torch.arange(num_rows * suffix_len).reshape(num_rows, suffix_len) + 100 * row_start
        return DecodeGroup(row_start, num_rows, torch.arange(3) + row_start, suffix)

    _assert_matches_reference(DecodeBatch((group(4, 3, 2), group(0, 2, 2), group(5, 4, 1))), 10)
