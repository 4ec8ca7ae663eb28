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
