"""The Triton KV write against `index_copy_` (compiled on CUDA, interpreted on the CPU):
strided inputs (views of a fused qkv GEMM), several head counts, a dtype cast, slots in any
order, and the empty batch."""

from __future__ import annotations

import pytest
import torch

from tests.kernels.layers.conftest import exact_device  # noqa: F401 (fixture)
from widebeam.kernels.kv.kv_write import write_kv_ref


@pytest.mark.parametrize("rows, heads, dim", [(1, 1, 16), (7, 2, 16), (33, 8, 128), (0, 3, 32)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kv_write_matches_index_copy(
    exact_device: torch.device,  # noqa: F811 (the interpreter's bf16 casts round like CUDA's)
    rows: int,
    heads: int,
    dim: int,
    dtype: torch.dtype,
) -> None:
    kernel_device = exact_device
    from widebeam.kernels.kv.triton_kv_write import supports, write_kv_triton

    gen = torch.Generator().manual_seed(rows * heads + dim)
    slots_total = 2 * rows + 5
    slots = torch.randperm(slots_total, generator=gen)[:rows].to(kernel_device)
    # k and v as views of one [rows, (q + 2) * heads * dim] projection output
    width = heads * dim
    fused = torch.randn(rows, 4 * width, generator=gen).to(dtype).to(kernel_device)
    k = fused[:, 2 * width : 3 * width].view(rows, heads, dim)
    v = fused[:, 3 * width :].view(rows, heads, dim)
    caches = {}
    for name in ("triton", "ref"):
        base = torch.randn(2, slots_total, heads, dim, generator=gen).to(kernel_device)
        caches[name] = base.to(torch.bfloat16)  # the cache's dtype differs from fp32 inputs
    caches["ref"].copy_(caches["triton"])
    k_cache, v_cache = caches["triton"]
    assert supports(k_cache, k, v)
    write_kv_triton(k_cache, v_cache, slots, k, v)
    write_kv_ref(caches["ref"][0], caches["ref"][1], slots, k, v)
    assert torch.equal(caches["triton"], caches["ref"])


def test_kv_write_rejects_mismatched_shapes(kernel_device: torch.device) -> None:
    from widebeam.kernels.kv.triton_kv_write import write_kv_triton

    cache = torch.zeros(4, 2, 16, device=kernel_device)
    k = torch.zeros(3, 2, 16, device=kernel_device)
    with pytest.raises(ValueError, match="disagree"):
        write_kv_triton(cache, cache, torch.arange(3, device=kernel_device), k, k[:, :1])
