"""Shared generated tokens read once per ancestor group (`suffix_tree` + the shared-suffix
kernel) == the torch reference (interpreter on the CPU, compiled on CUDA).

Beam-search-shaped suffixes (rows inherit a random parent's path each step), suffix lengths
below, at and past the split rule's thresholds, groups without a prompt, padding rows, GQA
1/2/3, fp32 / bf16 / fp16 and an FP8 cache; every slot no row references holds NaN.
"""

from __future__ import annotations

import pytest
import torch

from tests.kernels.attention.cases import beam_tree_case, tolerance
from tests.kernels.attention.test_fp8_kv import fp8_scales, quantized
from widebeam.kernels.attention.packed import pack_decode
from widebeam.kernels.attention.suffix_tree import (
    DEFAULT_SPLIT,
    ITEM_ROWS,
    MIN_SUFFIX_CAPACITY,
    NO_ANCESTOR,
    SplitRule,
)
from widebeam.kernels.attention.torch_ref import cascade_decode

# (rows, prompt_len, steps): shared lengths 8, 16, 0 (9 steps), 8 (16 steps: the first), 32
GROUPS = [(20, 30, 17), (3, 0, 24), (7, 9, 9), (1, 5, 16), (37, 64, 40)]


def test_split_rule() -> None:
    lengths = torch.tensor([0, 1, 8, 15, 16, 17, 23, 24, 40, 47, 48])
    shared = DEFAULT_SPLIT.shared_length(lengths)
    assert shared.tolist() == [0, 0, 0, 0, 8, 8, 8, 16, 32, 32, 40]
    assert int((lengths - shared).max()) == DEFAULT_SPLIT.longest_private == 15
    assert DEFAULT_SPLIT.longest_private < MIN_SUFFIX_CAPACITY  # one suffix tile of 16 suffices
    short = SplitRule(private_min=2, align=4)
    assert short.shared_length(lengths).tolist() == [0, 0, 4, 12, 12, 12, 20, 20, 36, 44, 44]
    assert int((lengths - short.shared_length(lengths)).max()) <= short.longest_private == 5
    with pytest.raises(ValueError, match="align >= 1"):
        SplitRule(private_min=2, align=0)


def test_plan_groups_rows_by_their_ancestor() -> None:
    case = beam_tree_case(
        GROUPS, q_heads=2, kv_heads=1, dim=16, dtype=torch.float32, device=torch.device("cpu"),
        seed=3, pad_rows=2,
    )  # fmt: skip
    rows = case.q.shape[0]
    packed = pack_decode(case.batch, rows, tree_rows=4)
    plan = packed.tree
    assert plan is not None and plan.block_rows == 4
    lengths = packed.row_suffix_len.long()
    shared = DEFAULT_SPLIT.shared_length(lengths)
    order, key = plan.order.long(), plan.key
    assert sorted(order.tolist()) == list(range(rows))
    covered: list[int] = []
    for item in plan.items[: int(plan.num_items)].tolist():
        run = [item]
        while len(run) < 4 and run[-1] + 1 < rows and key[run[-1] + 1] == key[item]:
            run.append(run[-1] + 1)
        members = order[run]
        assert bool((shared[members] > 0).all())
        depth = int(shared[members[0]])
        paths = packed.row_suffix_slots[members, :depth]
        assert bool((paths == paths[0]).all()), "an item's rows share their whole shared part"
        covered += members.tolist()
    assert sorted(covered) == torch.nonzero(shared > 0).flatten().tolist()
    assert bool((key[shared[order] == 0] == NO_ANCESTOR).all())
    assert int(plan.num_items) < int((shared > 0).sum()), "beams share: fewer items than rows"


def test_no_plan_for_short_suffix_buckets() -> None:
    case = beam_tree_case(
        [(4, 3, 5)], q_heads=2, kv_heads=1, dim=16, dtype=torch.float32,
        device=torch.device("cpu"), seed=0,
    )  # fmt: skip
    assert pack_decode(case.batch, 4, tree_rows=ITEM_ROWS).tree is None
    assert pack_decode(case.batch, 4, suffix_capacity=16, tree_rows=ITEM_ROWS).tree is not None
    assert pack_decode(case.batch, 4, suffix_capacity=16).tree is None
    with pytest.raises(ValueError, match="tree_rows"):
        pack_decode(case.batch, 4, tree_rows=-1)


CASES = {  # id: (q_heads, kv_heads, dtype, splits, fp8)
    "mha-fp32": (2, 2, torch.float32, 1, False),
    "gqa2-bf16-split2": (4, 2, torch.bfloat16, 2, False),
    "gqa3-fp16": (6, 2, torch.float16, 1, False),
    "gqa2-bf16-fp8kv": (4, 2, torch.bfloat16, 1, True),
}


@pytest.mark.parametrize("name", list(CASES))
def test_shared_suffix_matches_reference(kernel_device: torch.device, name: str) -> None:
    from widebeam.kernels.attention.triton_cascade import cascade_decode_packed
    from widebeam.kernels.attention.triton_common import gqa_padded

    q_heads, kv_heads, dtype, splits, fp8 = CASES[name]
    case = beam_tree_case(
        GROUPS, q_heads=q_heads, kv_heads=kv_heads, dim=32, dtype=dtype, device=kernel_device,
        seed=list(CASES).index(name), pad_rows=1,
    )  # fmt: skip
    k_cache, v_cache, scales = case.k_cache, case.v_cache, None
    if fp8:
        scales = fp8_scales(k_cache, v_cache, headroom=2.0)
        k_cache, v_cache = quantized(case, scales)
    rows = case.q.shape[0]
    block_rows = 16 // gqa_padded(q_heads, kv_heads)
    expected = cascade_decode(case.q, k_cache, v_cache, case.batch, 0.17, scales)
    real = case.real_rows
    outs = []
    narrow = block_rows  # the fewest rows per item the GPU's tl.dot takes (M = 16)
    rules = [(0, DEFAULT_SPLIT), (ITEM_ROWS, DEFAULT_SPLIT), (narrow, DEFAULT_SPLIT)]
    rules += [(ITEM_ROWS, SplitRule(2, 4)), (narrow, SplitRule(1, 1))]
    for tree_rows, rule in rules:
        packed = pack_decode(
            case.batch, rows, block_rows=block_rows, num_splits=splits, tree_rows=tree_rows,
            tree_split=rule,
        )  # fmt: skip
        assert (packed.tree is None) == (tree_rows == 0)
        out = torch.full_like(case.q, float("nan"))
        cascade_decode_packed(case.q, k_cache, v_cache, packed, 0.17, scales, out=out)
        torch.testing.assert_close(out[real].float(), expected[real].float(), **tolerance(dtype))
        assert (out[~real] == 0).all(), "padding rows must come back as zeros"
        outs.append(out)
    if dtype == torch.float32:  # the same sums in another order: within rounding
        torch.testing.assert_close(outs[1], outs[0], rtol=1e-5, atol=2e-5)
    if q_heads == kv_heads:  # M = rows per item × 1 query head: 8 rows are too few for tl.dot
        packed = pack_decode(case.batch, rows, block_rows=block_rows, tree_rows=8)
        with pytest.raises(ValueError, match="rows per item"):
            cascade_decode_packed(case.q, k_cache, v_cache, packed, 0.17, scales)


def test_padded_bucket_with_a_plan(kernel_device: torch.device) -> None:
    """CUDA-graph style capacities (more groups, work items, suffix slots than used): the plan
    still covers exactly the batch's rows."""
    from widebeam.kernels.attention.triton_cascade import cascade_decode_packed

    case = beam_tree_case(
        [(9, 12, 20), (5, 0, 3)], q_heads=4, kv_heads=2, dim=32, dtype=torch.float32,
        device=kernel_device, seed=5, pad_rows=3,
    )  # fmt: skip
    rows = case.q.shape[0]
    packed = pack_decode(
        case.batch, rows, block_rows=8, num_splits=1, max_splits=3, num_groups=4, num_work=9,
        suffix_capacity=32, table_capacity=40, tree_rows=ITEM_ROWS,
    )  # fmt: skip
    assert packed.tree is not None
    out = cascade_decode_packed(case.q, case.k_cache, case.v_cache, packed, 0.3)
    expected = cascade_decode(case.q, case.k_cache, case.v_cache, case.batch, 0.3)
    real = case.real_rows
    torch.testing.assert_close(out[real], expected[real], **tolerance(torch.float32))
    assert (out[~real] == 0).all()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_plan_never_waits_for_the_device() -> None:
    """The plan is built every decode step: it must only queue device work (no host read)."""
    case = beam_tree_case(
        [(300, 8, 40)], q_heads=2, kv_heads=1, dim=16, dtype=torch.float32,
        device=torch.device("cuda"), seed=1,
    )  # fmt: skip
    pack_decode(case.batch, 300, tree_rows=ITEM_ROWS)  # warm-up: first-call allocations
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        plan = pack_decode(case.batch, 300, tree_rows=ITEM_ROWS).tree
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert plan is not None and 0 < int(plan.num_items) < 300
