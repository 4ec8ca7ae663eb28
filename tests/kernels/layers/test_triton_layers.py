"""The fused RMSNorm and SiLU-product kernels against the torch reference (compiled on CUDA,
interpreted on the CPU): several shapes, per-head norms (3-D input), bf16 and fp32."""

from __future__ import annotations

import pytest
import torch

from widebeam.kernels.layers.torch_ref import rms_norm_ref, silu_mul_ref


@pytest.mark.parametrize("shape", [(5, 64), (3, 4, 128), (1, 1000), (0, 32)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm(kernel_device: torch.device, shape: tuple[int, ...], dtype: torch.dtype) -> None:
    from widebeam.kernels.layers.triton_layers import rms_norm_triton

    gen = torch.Generator().manual_seed(sum(shape))
    x = (torch.randn(shape, generator=gen) * 3).to(dtype).to(kernel_device)
    w = (torch.rand(shape[-1], generator=gen) + 0.5).to(dtype).to(kernel_device)
    got = rms_norm_triton(x, w, 1e-6)
    want = rms_norm_ref(x, w, 1e-6)
    assert got.shape == want.shape and got.dtype == want.dtype
    # same rounding points: the last place may differ (exp, rsqrt, summation order)
    tol = 1e-5 if dtype == torch.float32 else 2**-6  # two bf16 ulps
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("numel", [7, 1024, 3000])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_silu_mul(kernel_device: torch.device, numel: int, dtype: torch.dtype) -> None:
    from widebeam.kernels.layers.triton_layers import silu_mul_triton

    gen = torch.Generator().manual_seed(numel)
    gate = (torch.randn(numel, generator=gen) * 4).to(dtype).to(kernel_device).view(1, -1)
    up = torch.randn(numel, generator=gen).to(dtype).to(kernel_device).view(1, -1)
    got = silu_mul_triton(gate, up)
    tol = 1e-5 if dtype == torch.float32 else 2**-6  # two bf16 ulps
    torch.testing.assert_close(got, silu_mul_ref(gate, up), rtol=tol, atol=tol)


def test_silu_mul_rejects_mismatched_shapes(kernel_device: torch.device) -> None:
    from widebeam.kernels.layers.triton_layers import silu_mul_triton

    with pytest.raises(ValueError, match="must match"):
        silu_mul_triton(
            torch.ones(2, 3, device=kernel_device), torch.ones(3, 2, device=kernel_device)
        )


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_qwen_shapes_on_gpu() -> None:
    """Benchmark shapes: 5,120 rows × hidden 1024, per-head q-norm 16 × 128, MLP 3072."""
    from widebeam.kernels.layers.triton_layers import rms_norm_triton, silu_mul_triton

    gen = torch.Generator(device="cuda").manual_seed(0)
    for shape in [(5120, 1024), (5120, 16, 128)]:
        x = torch.randn(shape, device="cuda", generator=gen).to(torch.bfloat16)
        w = torch.rand(shape[-1], device="cuda", generator=gen).to(torch.bfloat16) + 0.5
        ref = rms_norm_ref(x, w, 1e-6)
        torch.testing.assert_close(rms_norm_triton(x, w, 1e-6), ref, rtol=2**-6, atol=2**-6)
    gate = torch.randn(5120, 3072, device="cuda", generator=gen).to(torch.bfloat16)
    up = torch.randn(5120, 3072, device="cuda", generator=gen).to(torch.bfloat16)
    got = silu_mul_triton(gate, up)
    torch.testing.assert_close(got, silu_mul_ref(gate, up), rtol=2**-6, atol=2**-6)


@pytest.mark.parametrize("rows, cols", [(1, 7), (5, 1000), (33, 2048)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_silu_mul_of_fused_halves(
    kernel_device: torch.device, rows: int, cols: int, dtype: torch.dtype
) -> None:
    """gate and up as the two halves of one gate_up GEMM's output (row stride 2 x cols)."""
    from widebeam.kernels.layers.triton_layers import silu_mul_triton

    gen = torch.Generator().manual_seed(rows * cols)
    fused = (torch.randn(rows, 2 * cols, generator=gen) * 4).to(dtype).to(kernel_device)
    gate, up = fused.split([cols, cols], dim=1)
    got = silu_mul_triton(gate, up)
    assert got.is_contiguous() and got.shape == (rows, cols)
    tol = 1e-5 if dtype == torch.float32 else 2**-6  # two bf16 ulps
    torch.testing.assert_close(got, silu_mul_ref(gate, up), rtol=tol, atol=tol)
