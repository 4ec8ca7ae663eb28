"""The Triton activation quantizer against the torch reference: the same scales and the same
FP8 bytes (ties to even, carries into the next power of two, subnormals, quotients at e4m3
rounding edges, zero rows, zero signs, padding), rows read whole or in chunks, in Triton's
interpreter on the CPU and compiled on CUDA.

Bit equality is achievable because every step of the reference is one IEEE-rounded fp32
operation on every device: the scale `amax * fp32(1/448)` (a product: torch's CUDA division by
a Python scalar is a product with its reciprocal, its CPU one a true division, so `amax / 448`
differed in the last bit between the two, which the H200 run showed), `x / scale` a
tensor-by-tensor division (IEEE on CUDA too; the kernel's corrected reciprocal product gives
the IEEE quotient, which needs true fused multiply-adds: the conftest gives the interpreter
those), the e4m3 rounding to nearest even."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from widebeam.kernels.fp8.quantize import FP8_MAX, INV_FP8_MAX, MIN_SCALE, Fp8Rows, quantize_rows
from widebeam.kernels.fp8.triton_quantize import (
    chunking,
    quantize_heads_triton,
    quantize_rows_triton,
)


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


def _assert_same(got: Fp8Rows, want: Fp8Rows) -> None:
    """The same FP8 bytes (zero signs included) and the same scales (on any devices)."""
    assert got.data.shape == want.data.shape and got.data.dtype == want.data.dtype
    assert torch.equal(got.scale.cpu(), want.scale.cpu())
    assert torch.equal(got.data.cpu().view(torch.uint8), want.data.cpu().view(torch.uint8))


@pytest.mark.parametrize("shape", [(64, 1024), (7, 64), (5, 30), (3, 6144)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_same_scales_and_values_as_the_reference(
    kernel_device: torch.device, shape: tuple[int, int], dtype: torch.dtype
) -> None:
    x = _mixed_rows(shape, dtype).to(kernel_device)
    _assert_same(quantize_rows_triton(x), quantize_rows(x))


@pytest.mark.parametrize(
    ("shape", "cols", "max_chunk"), [((5, 100), 112, 32), ((3, 6144), 6144, 1024)]
)
def test_rows_in_chunks_give_the_same_bytes(
    kernel_device: torch.device, shape: tuple[int, int], cols: int, max_chunk: int
) -> None:
    """Rows wider than `max_chunk` take two passes over chunks (the last one partly padding):
    the same bytes and scales as one pass over the whole row and as the reference."""
    x = _mixed_rows(shape, torch.bfloat16).to(kernel_device)
    assert not chunking(cols, max_chunk)["ONE_CHUNK"] and chunking(cols, 8192)["ONE_CHUNK"]
    chunked = quantize_rows_triton(x, cols, max_chunk=max_chunk)
    _assert_same(chunked, quantize_rows_triton(x, cols, max_chunk=8192))
    _assert_same(chunked, quantize_rows(x, cols))
    with pytest.raises(ValueError, match="power of two"):
        quantize_rows_triton(x, cols, max_chunk=48)


def _near_e4m3_midpoints(amax: float) -> torch.Tensor:
    """A row of amax `amax` (first element) whose other values x have x / scale within 3 fp32
    ulps of a midpoint between two e4m3 values (both signs): where an approximate quotient
    rounds to the other e4m3 neighbour."""
    scale = np.float32(amax) * np.float32(INV_FP8_MAX)
    grid = torch.arange(0, 127, dtype=torch.uint8).view(torch.float8_e4m3fn).float().numpy()
    midpoints = ((grid[:-1] + grid[1:]) / 2).astype(np.float32)  # up to (416 + 448) / 2
    centre = (midpoints * scale).astype(np.float32)
    values = [centre]
    for direction in (np.inf, -np.inf):
        step = centre
        for _ in range(3):
            step = np.nextafter(step, np.float32(direction))
            values.append(step)
    row = np.concatenate([np.float32([amax]), *values])
    row = row[np.abs(row) <= np.float32(amax)]
    return torch.from_numpy(np.concatenate([row, -row[1:]]))[None, :]


@pytest.mark.parametrize("amax", [1.0, 3.7, 0.013, 2.5e4])
def test_quotients_at_e4m3_rounding_edges(kernel_device: torch.device, amax: float) -> None:
    """Values whose quotient by the scale lies next to an e4m3 rounding edge: the kernel's
    division must round as IEEE division does. (A product with the reciprocal alone sends some
    of them to the other e4m3 neighbour: checked here, so the row does test that.)"""
    x = _near_e4m3_midpoints(amax)
    want = quantize_rows(x)
    approximate = (x / want.scale) != (x * (1.0 / want.scale))
    assert approximate.any()
    wrong = (x * (1.0 / want.scale)).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    assert not torch.equal(wrong.view(torch.uint8), want.data[:, : x.shape[1]].view(torch.uint8))
    for max_chunk in (8192, 64):
        _assert_same(quantize_rows_triton(x.to(kernel_device), max_chunk=max_chunk), want)


def test_rounding_cases(kernel_device: torch.device) -> None:
    """Values placed at e4m3's rounding edges (after scaling by the row's amax / 448), and zeros
    of both signs and values that round to zero (their signs kept, as torch keeps them)."""
    v = [448.0, 124.0, 124.33, 136.0, 152.0, 31.6, 0.0137, 0.00293, 0.0009, -124.0, -7.96, 3.0]
    v += [0.0, -0.0, -1e-9, 1e-9, -0.0009]
    x = torch.tensor([v])
    want, got = quantize_rows(x), quantize_rows_triton(x.to(kernel_device))
    assert float(want.scale) == 448.0 / FP8_MAX
    _assert_same(got, want)
    assert want.data.float()[0, :6].tolist() == [448.0, 128.0, 128.0, 128.0, 160.0, 32.0]
    signs = want.data.view(torch.uint8)[0, 12:17].tolist()
    assert signs == [0x00, 0x80, 0x80, 0x00, 0x80]


def test_padding_columns_are_zero_and_strided_rows_are_read(kernel_device: torch.device) -> None:
    base = torch.randn(6, 50, device=kernel_device)
    x = base[:, 5:45]  # row stride 50, 40 columns
    got = quantize_rows_triton(x, 64)
    assert got.data.shape == (6, 64) and (got.data[:, 40:].view(torch.uint8) == 0).all()
    _assert_same(got, quantize_rows(x, 64))
    _assert_same(quantize_rows_triton(x, 64, max_chunk=16), got)


@pytest.mark.parametrize(("rows", "heads", "dim"), [(7, 16, 128), (5, 6, 32), (3, 1, 16)])
def test_heads_quantize_each_as_a_row(
    kernel_device: torch.device, rows: int, heads: int, dim: int
) -> None:
    """`quantize_heads_triton` (the cascade's FP8 queries): every (row, head) gets the bytes and
    the scale `quantize_rows` gives it as a row of its own, heads that are not a power of two
    and heads read through a row stride (a view of a wider tensor) included."""
    mixed = _mixed_rows((rows * heads, dim), torch.bfloat16).view(rows, heads, dim)
    mixed[1, -1] = torch.tensor([124.33, -0.0, 1e-9] * dim)[:dim]  # rounding edges, zero signs
    wider = torch.zeros(rows, heads + 3, dim, dtype=torch.bfloat16)
    wider[:, 1 : heads + 1] = mixed
    x = wider.to(kernel_device)[:, 1 : heads + 1]  # row stride (heads + 3) * dim
    data, scale = quantize_heads_triton(x)
    want = quantize_rows(mixed.reshape(rows * heads, dim), cols=dim)
    assert data.shape == (rows, heads, dim) and scale.shape == (rows, heads)
    _assert_same(Fp8Rows(data.reshape(rows * heads, dim), scale.reshape(-1, 1)), want)
    with pytest.raises(ValueError, match="power of two"):
        quantize_heads_triton(torch.zeros(2, 2, 48, device=kernel_device))
