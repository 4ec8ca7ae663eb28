"""The one-pass Triton activation quantizer against the torch reference: the same scales and
the same FP8 values (ties to even, carries into the next power of two, subnormals, zero rows,
padding), in Triton's interpreter on the CPU and compiled on CUDA.

Bit equality is achievable because every step of the reference is one IEEE-rounded fp32
operation on every device: the scale `amax * fp32(1/448)` (a product: torch's CUDA division by
a Python scalar is a product with its reciprocal, its CPU one a true division, so `amax / 448`
differed in the last bit between the two, which the H200 run showed), `x / scale` a
tensor-by-tensor division (IEEE on CUDA too; the kernel uses `div_rn`), the e4m3 rounding to
nearest even."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from widebeam.kernels.fp8.quantize import FP8_MAX, INV_FP8_MAX, MIN_SCALE, quantize_rows
from widebeam.kernels.fp8.triton_quantize import quantize_rows_triton

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _mixed_rows(shape: tuple[int, int], dtype: torch.dtype) -> torch.Tensor:
    """Rows of magnitudes 1e-6 .. 1e3, the first all zeros (on the CPU)."""
    generator = torch.Generator().manual_seed(shape[1])
    x = torch.randn(*shape, generator=generator) * torch.logspace(-6, 3, shape[0])[:, None]
    x[0] = 0.0
    return x.to(dtype)


def test_reference_scale_is_one_fp32_product() -> None:
    """The reference's scales are numpy's IEEE fp32 `max(amax, 1e-12) * fp32(1/448)`."""
    x = _mixed_rows((64, 1024), torch.float32)
    amax = np.abs(x.numpy()).max(axis=1, keepdims=True).astype(np.float32)
    want = np.maximum(amax, np.float32(MIN_SCALE)) * np.float32(INV_FP8_MAX)
    assert np.float32(INV_FP8_MAX) == np.float32(1.0) / np.float32(FP8_MAX)
    assert np.array_equal(quantize_rows(x).scale.numpy(), want)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_reference_is_the_same_on_cpu_and_cuda(dtype: torch.dtype) -> None:
    x = _mixed_rows((64, 1024), dtype)
    on_cpu, on_cuda = quantize_rows(x), quantize_rows(x.cuda())
    assert torch.equal(on_cuda.scale.cpu(), on_cpu.scale)
    assert torch.equal(on_cuda.data.cpu().view(torch.uint8), on_cpu.data.view(torch.uint8))


@pytest.mark.parametrize("shape", [(64, 1024), (7, 64), (5, 30), (3, 6144)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_same_scales_and_values_as_the_reference(
    shape: tuple[int, int], dtype: torch.dtype
) -> None:
    x = _mixed_rows(shape, dtype).to(DEVICE)
    want, got = quantize_rows(x), quantize_rows_triton(x)
    assert got.data.shape == want.data.shape and got.data.dtype == want.data.dtype
    assert torch.equal(got.scale, want.scale)
    assert torch.equal(got.data.float(), want.data.float())  # (a zero's sign may differ)


def test_rounding_cases() -> None:
    """Values placed at e4m3's rounding edges (after scaling by the row's amax / 448)."""
    v = [448.0, 124.0, 124.33, 136.0, 152.0, 31.6, 0.0137, 0.00293, 0.0009, -124.0, -7.96, 3.0]
    x = torch.tensor([v], device=DEVICE)
    want, got = quantize_rows(x), quantize_rows_triton(x)
    assert float(want.scale) == 448.0 / FP8_MAX
    assert got.data.float().tolist() == want.data.float().tolist()
    assert want.data.float()[0, :6].tolist() == [448.0, 128.0, 128.0, 128.0, 160.0, 32.0]


def test_padding_columns_are_zero_and_strided_rows_are_read() -> None:
    base = torch.randn(6, 50, device=DEVICE)
    x = base[:, 5:45]  # row stride 50, 40 columns
    got = quantize_rows_triton(x, 64)
    assert got.data.shape == (6, 64) and (got.data[:, 40:].float() == 0).all()
    assert torch.equal(got.data.float(), quantize_rows(x, 64).data.float())
