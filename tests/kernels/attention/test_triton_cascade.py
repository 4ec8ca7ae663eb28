"""Triton cascade decode == torch reference (interpreter on the CPU, compiled on CUDA).

Ragged groups (prompt 0, 1, not a multiple of the tile, several tiles; 1..20 rows, several
prefix blocks), suffix lengths 1..7, padding rows, GQA 1/2/3, prompt splits (including splits
that get no tokens), slot and page tables, fp32 / bf16 / fp16, head_dim 32/64. Outputs are
poisoned (NaN) before the call and every KV slot no group references holds NaN.
"""

from __future__ import annotations

import pytest
import torch

from tests.kernels.attention.cases import decode_case, tolerance
from widebeam.kernels.attention.packed import pack_decode
from widebeam.kernels.attention.torch_ref import cascade_decode

# (rows, prompt_len, suffix_len) per group
GROUPS = [(3, 70, 2), (20, 1, 5), (1, 0, 3), (6, 130, 7), (2, 64, 1)]

CASES = {  # id: (q_heads, kv_heads, dim, dtype, num_splits, page_size)
    "mha-fp32": (4, 4, 32, torch.float32, 1, 1),
    "gqa2-fp32-split3": (4, 2, 32, torch.float32, 3, 1),
    "gqa3-fp32-split2-page4": (6, 2, 32, torch.float32, 2, 4),
    "gqa2-bf16-d64-page16": (4, 2, 64, torch.bfloat16, 1, 16),
    "mha-bf16-split4": (2, 2, 32, torch.bfloat16, 4, 1),
    "gqa2-fp16-split2-page4": (4, 2, 32, torch.float16, 2, 4),
}


@pytest.mark.parametrize("name", list(CASES))
def test_cascade_matches_reference(kernel_device: torch.device, name: str) -> None:
    from widebeam.kernels.attention.triton_cascade import cascade_decode_packed
    from widebeam.kernels.attention.triton_common import gqa_padded

    q_heads, kv_heads, dim, dtype, splits, page_size = CASES[name]
    case = decode_case(
        GROUPS, q_heads=q_heads, kv_heads=kv_heads, dim=dim, dtype=dtype,
        device=kernel_device, seed=list(CASES).index(name), pad_rows=1, page_size=page_size,
    )  # fmt: skip
    rows = case.q.shape[0]
    block_rows = 16 // gqa_padded(q_heads, kv_heads)  # smallest tile the GPU's tl.dot takes
    packed = pack_decode(
        case.batch, rows, block_rows=block_rows, num_splits=splits, page_size=page_size
    )
    out = torch.full_like(case.q, float("nan"))
    cascade_decode_packed(case.q, case.k_cache, case.v_cache, packed, 0.17, out=out)
    expected = cascade_decode(case.q, case.k_cache, case.v_cache, case.batch, 0.17)
    real = case.real_rows
    torch.testing.assert_close(out[real].float(), expected[real].float(), **tolerance(dtype))
    assert (out[~real] == 0).all(), "padding rows must come back as zeros"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cascade_matches_reference_at_the_widest_prefix_tile(
    kernel_device: torch.device, dtype: torch.dtype
) -> None:
    """Work items of PREFIX_MAX_M queries launch with the tile `prefix_tile` names for the
    cache's dtype (bf16: 32-token prompt tiles): the ragged prompts (0, 1, 64, 70, 130 tokens)
    end mid-tile and still match the reference."""
    from widebeam.kernels.attention.triton_cascade import cascade_decode_packed
    from widebeam.kernels.attention.triton_common import PREFIX_MAX_M, gqa_padded

    case = decode_case(
        GROUPS, q_heads=4, kv_heads=2, dim=32, dtype=dtype, device=kernel_device, seed=7,
        pad_rows=1, page_size=16,
    )  # fmt: skip
    rows = case.q.shape[0]
    packed = pack_decode(
        case.batch, rows, block_rows=PREFIX_MAX_M // gqa_padded(4, 2), num_splits=2, page_size=16
    )
    out = torch.full_like(case.q, float("nan"))
    cascade_decode_packed(case.q, case.k_cache, case.v_cache, packed, 0.17, out=out)
    expected = cascade_decode(case.q, case.k_cache, case.v_cache, case.batch, 0.17)
    real = case.real_rows
    torch.testing.assert_close(out[real].float(), expected[real].float(), **tolerance(dtype))


def test_padded_capacities_and_empty_rows(kernel_device: torch.device) -> None:
    """CUDA-graph style: G, B, S, the table and the launched splits padded past what the batch
    uses; a group with no prompt and a zero-length suffix (no KV at all) yields zeros, not
    NaN; the launch's surplus splits change nothing."""
    from widebeam.kernels.attention.triton_cascade import cascade_decode_packed

    case = decode_case(
        [(2, 0, 0), (5, 33, 3)], q_heads=4, kv_heads=2, dim=32, dtype=torch.float32,
        device=kernel_device, seed=11, pad_rows=3,
    )  # fmt: skip
    rows = case.q.shape[0]
    packed = pack_decode(
        case.batch, rows, block_rows=8, num_splits=2, max_splits=5, num_groups=4, num_work=9,
        suffix_capacity=12, table_capacity=80,
    )  # fmt: skip
    out = cascade_decode_packed(case.q, case.k_cache, case.v_cache, packed, 0.3)
    tight = pack_decode(case.batch, rows, block_rows=8, num_splits=2)
    assert torch.equal(out, cascade_decode_packed(case.q, case.k_cache, case.v_cache, tight, 0.3))
    expected = cascade_decode(case.q, case.k_cache, case.v_cache, case.batch, 0.3)
    first = case.batch.groups[0]
    empty = slice(first.row_start, first.row_start + first.num_rows)
    assert (out[empty] == 0).all() and (out[~case.real_rows] == 0).all()
    second = case.batch.groups[1]
    rs = slice(second.row_start, second.row_start + second.num_rows)
    torch.testing.assert_close(out[rs], expected[rs], **tolerance(torch.float32))


def test_no_rows(kernel_device: torch.device) -> None:
    from widebeam.kernels.attention.triton_cascade import cascade_decode_packed

    case = decode_case(
        [], q_heads=2, kv_heads=1, dim=16, dtype=torch.float32, device=kernel_device, seed=0
    )
    packed = pack_decode(case.batch, 0, device=kernel_device)
    out = cascade_decode_packed(case.q, case.k_cache, case.v_cache, packed, 0.3)
    assert out.shape == (0, 2, 16)


# Suffix kernel tiles: 1-row groups give rows of one block different suffix lengths (0..17),
# prompt-only rows and a row with no KV at all; 25 rows is no multiple of any BLOCK_R.
MIXED = [(5, 20, 3), (1, 0, 0), (1, 7, 9), (3, 0, 1), (2, 33, 17), (1, 0, 5), (4, 12, 0)]
TILES = [(r, s) for r in (1, 2, 4, 8, 16) for s in (None, 4, 32)]  # s 4: 5 tiles, 32: one


@pytest.mark.parametrize(("rows_per_program", "block_s"), TILES)
@pytest.mark.parametrize(
    ("q_heads", "dtype", "splits"), [(4, torch.float32, 3), (6, torch.bfloat16, 1)]
)
def test_suffix_tiles_match_reference(
    kernel_device: torch.device,
    rows_per_program: int,
    block_s: int | None,
    q_heads: int,
    dtype: torch.dtype,
    splits: int,
) -> None:
    from widebeam.kernels.attention.triton_cascade import cascade_decode_packed

    case = decode_case(
        MIXED, q_heads=q_heads, kv_heads=2, dim=32, dtype=dtype, device=kernel_device,
        seed=rows_per_program, pad_rows=1,
    )  # fmt: skip
    rows = case.q.shape[0]
    packed = pack_decode(case.batch, rows, block_rows=8, num_splits=splits, suffix_capacity=20)
    out = torch.full_like(case.q, float("nan"))
    cascade_decode_packed(
        case.q, case.k_cache, case.v_cache, packed, 0.2, out=out,
        rows_per_program=rows_per_program, block_s=block_s,
    )  # fmt: skip
    expected = cascade_decode(case.q, case.k_cache, case.v_cache, case.batch, 0.2)
    real = case.real_rows
    torch.testing.assert_close(out[real].float(), expected[real].float(), **tolerance(dtype))
    assert (out[~real] == 0).all(), "padding rows must come back as zeros"
    empty = case.batch.groups[1]  # no prompt, no suffix
    assert (out[empty.row_start] == 0).all(), "a row with no KV must come back as zeros"


def test_suffix_tile_choice() -> None:
    """Defaults depend on shapes only; BLOCK_R × BLOCK_S >= 16 (the PV dot's K dimension)."""
    from widebeam.kernels.attention.triton_cascade import suffix_tiles

    assert suffix_tiles(5000, 8, 2, 16) == (4, 16)  # Qwen3 at W1: M = 8, one tile
    assert suffix_tiles(5000, 8, 2, 8) == (4, 8)
    assert suffix_tiles(5000, 8, 1, 128) == (8, 16)
    assert suffix_tiles(256, 8, 2, 8) == (2, 8)  # small grid: fewer rows per program
    assert suffix_tiles(5000, 8, 2, 8, tensor_cores=False) == (1, 16)  # fp32: no block diagonal
    assert suffix_tiles(5000, 8, 2, 4, rows_per_program=1) == (1, 16)
    assert suffix_tiles(5000, 8, 2, 64, rows_per_program=4, block_s=32) == (4, 32)
    with pytest.raises(ValueError, match="powers of 2"):
        suffix_tiles(5000, 8, 2, 16, rows_per_program=3)
