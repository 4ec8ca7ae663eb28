"""The Triton KV write against `index_copy_` (compiled on CUDA, interpreted on the CPU):
strided inputs (views of a fused qkv GEMM), several head counts, a dtype cast, slots in any
order, and the empty batch; an FP8 cache against the torch reference's quantization."""

from __future__ import annotations

import pytest
import torch

from tests.kernels.layers.conftest import exact_device  # noqa: F401 (fixture)
from widebeam.kernels.kv.fp8_kv import KV_FP8_DTYPE, KvScales
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


@pytest.mark.parametrize(
    "keep_rows", [None, KV_FP8_DTYPE, torch.bfloat16], ids=["no-rows", "fp8-rows", "bf16-rows"]
)
def test_fp8_kv_write_matches_the_reference_bit_for_bit(
    kernel_device: torch.device, keep_rows: torch.dtype | None
) -> None:
    """An FP8 cache: the Triton write quantizes as `quantize_kv` does (per-head reciprocal
    scales, saturation at ±448, ties to even, the sign of a value that rounds to zero), and
    `rows_out` receives the stored rows, as stored or widened to bf16 (what a prefill reads)."""
    from widebeam.kernels.kv.triton_kv_write import write_kv_triton

    gen = torch.Generator().manual_seed(3)
    rows, heads, dim, slots_total = 21, 3, 32, 50
    width = heads * dim
    fused = torch.randn(rows, 4 * width, generator=gen).to(torch.bfloat16)
    fused[:, 2 * width :] *= torch.logspace(-4, 2, rows).to(torch.bfloat16)[:, None]
    fused[0, 2 * width] = 1e6  # far beyond 448 x its head's scale: saturates
    fused[1, 3 * width] = -1e6
    fused = fused.to(kernel_device)
    k = fused[:, 2 * width : 3 * width].view(rows, heads, dim)
    v = fused[:, 3 * width :].view(rows, heads, dim)
    scales = KvScales.of(
        torch.tensor([0.05, 0.5, 2.0]).to(kernel_device),
        torch.tensor([1e-3, 3e-2, 0.7]).to(kernel_device),
    )
    slots = torch.randperm(slots_total, generator=gen)[:rows].to(kernel_device)
    results = []
    for write in (write_kv_triton, write_kv_ref):
        cache = torch.zeros(2, slots_total, heads, dim, dtype=KV_FP8_DTYPE, device=kernel_device)
        kept = None
        if keep_rows is not None:
            kept = tuple(torch.empty(rows, heads, dim, dtype=keep_rows).to(kernel_device)
                         for _ in range(2))  # fmt: skip
        write(cache[0], cache[1], slots, k, v, scales, kept)
        results.append((cache, kept))
    (triton_cache, triton_rows), (ref_cache, ref_rows) = results
    assert torch.equal(triton_cache.view(torch.uint8), ref_cache.view(torch.uint8))
    assert triton_cache.float().abs().max() == 448.0
    if keep_rows is not None:
        for got, want, stored in zip(triton_rows, ref_rows, triton_cache, strict=True):
            assert got.dtype == keep_rows
            assert torch.equal(got.float(), want.float())
            assert torch.equal(got.float(), stored[slots].float())


def test_fp8_cache_needs_scales_and_a_plain_one_refuses_them(kernel_device: torch.device) -> None:
    from widebeam.kernels.kv.triton_kv_write import write_kv_triton

    k = torch.zeros(3, 2, 16, device=kernel_device)
    slots = torch.arange(3, device=kernel_device)
    fp8 = torch.zeros(4, 2, 16, dtype=KV_FP8_DTYPE, device=kernel_device)
    ones = torch.ones(2, device=kernel_device)
    for write in (write_kv_triton, write_kv_ref):
        with pytest.raises(ValueError, match="needs its layer's KvScales"):
            write(fp8, fp8.clone(), slots, k, k)
        with pytest.raises(ValueError, match="takes no KvScales"):
            write(k.clone(), k.clone(), slots, k, k, KvScales.of(ones, ones))


def test_rows_out_in_another_dtype_is_refused(kernel_device: torch.device) -> None:
    """Rows kept in the cache's dtype, or an FP8 cache's values widened to a float that holds
    them; anything else would round what the prefill reads."""
    from widebeam.kernels.kv.triton_kv_write import write_kv_triton

    k = torch.zeros(3, 2, 16, dtype=torch.bfloat16, device=kernel_device)
    slots = torch.arange(3, device=kernel_device)
    ones = torch.ones(2, device=kernel_device)
    fp8 = torch.zeros(4, 2, 16, dtype=KV_FP8_DTYPE, device=kernel_device)
    plain = torch.zeros(4, 2, 16, dtype=torch.bfloat16, device=kernel_device)
    uint8_rows = tuple(torch.zeros(3, 2, 16, dtype=torch.uint8, device=kernel_device)
                       for _ in range(2))  # fmt: skip
    fp32_rows = tuple(torch.zeros(3, 2, 16, device=kernel_device) for _ in range(2))
    short_rows = tuple(torch.zeros(2, 2, 16, dtype=torch.bfloat16, device=kernel_device)
                       for _ in range(2))  # fmt: skip
    for write in (write_kv_triton, write_kv_ref):
        with pytest.raises(ValueError, match="rows_out must be two tensors of shape"):
            write(fp8, fp8.clone(), slots, k, k, KvScales.of(ones, ones), uint8_rows)
        with pytest.raises(ValueError, match=r"in torch.bfloat16, got"):
            write(plain, plain.clone(), slots, k, k, None, fp32_rows)  # a bf16 cache: bf16
        with pytest.raises(ValueError, match=r"shape \(3, 2, 16\)"):
            write(fp8, fp8.clone(), slots, k, k, KvScales.of(ones, ones), short_rows)
        assert not fp8.float().any() and not plain.float().any()  # nothing written
