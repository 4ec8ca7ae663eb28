"""The one-pass Triton activation quantizer against the torch reference: the same scales and
the same FP8 values (ties to even, carries into the next power of two, subnormals, zero rows,
padding), in Triton's interpreter on the CPU and compiled on CUDA."""

from __future__ import annotations

import pytest
import torch

from widebeam.kernels.fp8.quantize import FP8_MAX, quantize_rows
from widebeam.kernels.fp8.triton_quantize import quantize_rows_triton

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.parametrize("shape", [(64, 1024), (7, 64), (5, 30), (3, 6144)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_same_scales_and_values_as_the_reference(
    shape: tuple[int, int], dtype: torch.dtype
) -> None:
    generator = torch.Generator().manual_seed(shape[1])
    x = torch.randn(*shape, generator=generator) * torch.logspace(-6, 3, shape[0])[:, None]
    x[0] = 0.0
    x = x.to(dtype).to(DEVICE)
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
