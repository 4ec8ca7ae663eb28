"""Triton ragged causal prefill == torch reference (interpreter on the CPU, compiled on CUDA)."""

from __future__ import annotations

import itertools

import pytest
import torch

from tests.kernels.attention.cases import tolerance

CASES = {  # id: (segment lengths, q_heads, kv_heads, dim, dtype)
    "mha-fp32": ((5, 1, 70, 0, 33), 2, 2, 32, torch.float32),
    "gqa2-fp32": ((1, 64, 65, 3), 4, 2, 32, torch.float32),
    "gqa3-bf16-d64": ((17, 40), 6, 2, 64, torch.bfloat16),
    "gqa2-fp16": ((9, 100), 4, 2, 32, torch.float16),
}


@pytest.mark.parametrize("name", list(CASES))
def test_prefill_matches_reference(kernel_device: torch.device, name: str) -> None:
    from widebeam.kernels.attention.torch_ref import causal_prefill
    from widebeam.kernels.attention.triton_prefill import ragged_causal_prefill

    lengths, q_heads, kv_heads, dim, dtype = CASES[name]
    cu = (0, *itertools.accumulate(lengths))
    gen = torch.Generator().manual_seed(list(CASES).index(name))

    def rand(heads: int) -> torch.Tensor:
        return torch.randn(cu[-1], heads, dim, generator=gen).to(dtype).to(kernel_device)

    q, k, v = rand(q_heads), rand(kv_heads), rand(kv_heads)
    out = torch.full_like(q, float("nan"))
    ragged_causal_prefill(q, k, v, cu, 0.21, out=out)
    expected = causal_prefill(q, k, v, cu, 0.21)
    torch.testing.assert_close(out.float(), expected.float(), **tolerance(dtype))


OPTIONS = list(itertools.product((False, True), repeat=3))  # split diagonal, TMA, heavy first


@pytest.mark.parametrize("name", ["mha-fp32", "gqa2-fp32", "gqa3-bf16-d64"])
@pytest.mark.parametrize(("split", "tma", "heavy"), OPTIONS)
def test_prefill_options_match_reference(
    kernel_device: torch.device, name: str, split: bool, tma: bool, heavy: bool
) -> None:
    """The unmasked tiles before the diagonal, the tensor-descriptor loads and the work
    order change how the kernel runs, never what it computes. A 16-key tile makes the
    70- and 65-token segments cross several unmasked tiles and end mid-tile."""
    from widebeam.kernels.attention.torch_ref import causal_prefill
    from widebeam.kernels.attention.triton_prefill import (
        prefill_block_q,
        prefill_work,
        ragged_causal_prefill,
    )

    lengths, q_heads, kv_heads, dim, dtype = CASES[name]
    cu = (0, *itertools.accumulate(lengths))
    gen = torch.Generator().manual_seed(7)
    q, k, v = (
        torch.randn(cu[-1], h, dim, generator=gen).to(dtype).to(kernel_device)
        for h in (q_heads, kv_heads, kv_heads)
    )
    work = prefill_work(cu, prefill_block_q(q_heads, kv_heads), kernel_device, heavy_first=heavy)
    out = torch.full_like(q, float("nan"))
    ragged_causal_prefill(
        q, k, v, cu, 0.21, work=work, out=out, block_n=16, split_diagonal=split, tma=tma
    )
    expected = causal_prefill(q, k, v, cu, 0.21)
    torch.testing.assert_close(out.float(), expected.float(), **tolerance(dtype))


def test_heavy_first_orders_by_keys_read() -> None:
    from widebeam.kernels.attention.triton_prefill import prefill_work

    cu = (0, 5, 70, 71, 200)
    plain = prefill_work(cu, 16, torch.device("cpu"), heavy_first=False)
    heavy = prefill_work(cu, 16, torch.device("cpu"), heavy_first=True)
    keys = (heavy[2] - heavy[0]).tolist()  # keys before each block's first query
    assert keys == sorted(keys, reverse=True)
    as_set = {tuple(col) for col in plain.t().tolist()}
    assert as_set == {tuple(col) for col in heavy.t().tolist()}
    assert len(as_set) == plain.shape[1] == 1 + 5 + 1 + 9  # blocks of 16 per segment


def test_tma_refused_where_the_layout_cannot_take_it(kernel_device: torch.device) -> None:
    """Asked for explicitly, tensor-descriptor loads need each token's heads contiguous and
    K, V in q's dtype; refused with the reason, the output untouched."""
    from widebeam.kernels.attention.triton_prefill import ragged_causal_prefill
    from widebeam.kernels.kv.fp8_kv import KV_FP8_DTYPE, KvScales

    gen = torch.Generator().manual_seed(3)
    q = torch.randn(20, 4, 32, generator=gen).to(kernel_device)
    wide = torch.randn(20, 2, 64, generator=gen).to(kernel_device)
    strided = wide[..., :32]  # heads 64 elements apart
    out = torch.zeros_like(q)
    with pytest.raises(ValueError, match="tma needs"):
        ragged_causal_prefill(q, strided, strided, (0, 20), 0.2, out=out, tma=True)
    k8 = torch.randn(20, 2, 32, generator=gen).to(kernel_device).to(KV_FP8_DTYPE)
    scales = KvScales.of(torch.ones(2, device=kernel_device), torch.ones(2, device=kernel_device))
    with pytest.raises(ValueError, match="tma needs"):
        ragged_causal_prefill(q, k8, k8, (0, 20), 0.2, scales, out=out, widen_kv=False, tma=True)
    assert not out.any()
    # the default rule reads such K and V through pointers
    ragged_causal_prefill(q, strided, strided, (0, 20), 0.2, out=out)
    assert out.any()
