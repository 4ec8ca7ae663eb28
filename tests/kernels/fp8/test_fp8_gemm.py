"""The FP8 linear: per-row quantization, the reference's error against the exact product, the
`torch._scaled_mm` path against the reference (on CPU where torch implements it, and on CUDA),
padding of unaligned shapes, and CUDA-graph capture."""

from __future__ import annotations

import functools

import pytest
import torch

from widebeam.kernels.fp8.backend import SCALED_MM, TORCH_REFERENCE, fp8_gemm_for
from widebeam.kernels.fp8.quantize import (
    FP8_DTYPE,
    FP8_MAX,
    concat_weights,
    dequantize_rows,
    quantize_rows,
    quantize_weight,
)
from widebeam.kernels.fp8.scaled_mm import fp8_linear_scaled_mm
from widebeam.kernels.fp8.torch_ref import fp8_linear_ref

# (tokens, in, out): aligned, and unaligned in every dimension (padded to 16)
SHAPES = [(7, 64, 48), (5, 30, 20), (33, 256, 512), (1, 128, 16)]
# e4m3 keeps 3 mantissa bits: each operand's rounding is ~2.5% rms relative, about 3.5-3.8%
# together on Gaussian data (measured); 5% is the bound the issue asks for.
MAX_RELATIVE_ERROR = 0.05
# Below this the GEMM was not quantized at all.
MIN_RELATIVE_ERROR = 0.01


@functools.cache
def _cpu_rowwise_scaled_mm() -> bool:
    """Whether this torch's CPU `_scaled_mm` takes row-wise scales (2.13 does; 2.11's oneDNN
    path asserts "only supports per-tensor scaling for CPU backend"): one tiny call, probed
    once, rather than a version comparison."""
    a = torch.zeros(16, 16, dtype=FP8_DTYPE)
    try:
        torch._scaled_mm(
            a,
            a.t(),
            scale_a=torch.ones(16, 1),
            scale_b=torch.ones(1, 16),
            out_dtype=torch.bfloat16,
        )
    except (RuntimeError, NotImplementedError):
        return False
    return True


def _relative(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.float() - want.float()).norm() / want.float().norm())


def _case(tokens: int, k: int, n: int, dtype: torch.dtype, device: str = "cpu"):
    generator = torch.Generator(device=device).manual_seed(tokens * 1000 + k + n)
    weight = torch.randn(n, k, generator=generator, device=device) / k**0.5
    x = torch.randn(tokens, k, generator=generator, device=device).to(dtype)
    return x, weight.to(dtype)


def test_rows_scale_by_amax_over_448_and_round_trip() -> None:
    x = torch.randn(6, 40) * torch.logspace(-3, 3, 6)[:, None]
    x[2] = 0.0
    rows = quantize_rows(x)
    assert rows.data.dtype == FP8_DTYPE and rows.data.shape == (6, 48)  # padded to 16
    assert rows.scale.shape == (6, 1) and rows.scale.dtype == torch.float32
    nonzero = [0, 1, 3, 4, 5]
    torch.testing.assert_close(rows.scale[nonzero, 0], x[nonzero].abs().amax(1) / FP8_MAX)
    assert (rows.data[nonzero].float().abs().amax(1) == FP8_MAX).all()
    assert (rows.data[:, 40:].float() == 0).all() and (rows.data[2].float() == 0).all()
    back = dequantize_rows(rows)[:, :40]
    assert _relative(back, x) < 0.04  # each row to its own scale: magnitudes do not matter


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", SHAPES)
def test_reference_error_is_bounded(shape: tuple[int, int, int], dtype: torch.dtype) -> None:
    tokens, k, n = shape
    x, weight = _case(tokens, k, n, dtype)
    fp8 = quantize_weight(weight)
    assert fp8.data.shape == (-(-n // 16) * 16, -(-k // 16) * 16)
    got = fp8_linear_ref(x, fp8, None)
    assert got.shape == (tokens, n) and got.dtype == dtype
    error = _relative(got, x.float() @ weight.float().t())
    assert MIN_RELATIVE_ERROR < error < MAX_RELATIVE_ERROR, error


def test_bias_is_added_in_the_model_dtype() -> None:
    x, weight = _case(4, 32, 16, torch.bfloat16)
    bias = torch.randn(16).to(torch.bfloat16)
    fp8 = quantize_weight(weight)
    torch.testing.assert_close(fp8_linear_ref(x, fp8, bias), fp8_linear_ref(x, fp8, None) + bias)


def test_fused_weights_are_their_parts_concatenated() -> None:
    x, weight = _case(9, 48, 40, torch.float32)
    parts = [quantize_weight(weight[:24]), quantize_weight(weight[24:])]
    fused = concat_weights(parts)
    whole = quantize_weight(weight)
    assert torch.equal(fused.data.float(), whole.data.float())
    assert torch.equal(fused.scale, whole.scale)
    torch.testing.assert_close(fp8_linear_ref(x, fused, None), fp8_linear_ref(x, whole, None))


@pytest.mark.parametrize("shape", SHAPES)
def test_scaled_mm_path_matches_the_reference_on_cpu(shape: tuple[int, int, int]) -> None:
    """Where torch implements row-wise `_scaled_mm` on the CPU too (2.13; not 2.11): the CUDA
    path's layout (padding, transposed weight, scale shapes) is checked here; the kernels agree
    up to bf16 rounding."""
    if not _cpu_rowwise_scaled_mm():
        pytest.skip(f"torch {torch.__version__}'s CPU _scaled_mm takes per-tensor scales only")
    x, weight = _case(*shape, torch.bfloat16)
    fp8 = quantize_weight(weight)
    want = fp8_linear_ref(x, fp8, None)
    got = fp8_linear_scaled_mm(x, fp8, None)
    assert got.shape == want.shape and got.dtype == torch.bfloat16 and got.is_contiguous()
    assert _relative(got, want) < 1e-2


def test_path_chosen_by_device() -> None:
    assert fp8_gemm_for(torch.device("cpu"), torch.float32) is TORCH_REFERENCE
    assert fp8_gemm_for(torch.device("cpu"), torch.bfloat16) is TORCH_REFERENCE


@pytest.mark.gpu
def test_cuda_path_needs_bfloat16() -> None:
    with pytest.raises(ValueError, match="bfloat16"):
        fp8_gemm_for(torch.device("cuda"), torch.float16)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [*SHAPES, (6144, 2048, 6144)])
def test_scaled_mm_matches_the_reference_on_cuda(shape: tuple[int, int, int]) -> None:
    assert fp8_gemm_for(torch.device("cuda"), torch.bfloat16) is SCALED_MM
    x, weight = _case(*shape, torch.bfloat16, device="cuda")
    fp8 = quantize_weight(weight)
    bias = torch.randn(shape[2], device="cuda").to(torch.bfloat16)
    want = fp8_linear_ref(x, fp8, bias)
    got = fp8_linear_scaled_mm(x, fp8, bias)
    assert got.shape == want.shape and got.dtype == torch.bfloat16
    assert _relative(got, want) < 1e-2
    error = _relative(got - bias, x.float() @ weight.float().t())
    assert MIN_RELATIVE_ERROR < error < MAX_RELATIVE_ERROR, error


@pytest.mark.gpu
def test_scaled_mm_path_is_captured_by_a_cuda_graph() -> None:
    """No read to the host in the FP8 path: a captured replay equals the eager call on new
    inputs written into the captured buffer."""
    x, weight = _case(64, 256, 384, torch.bfloat16, device="cuda")
    fp8 = quantize_weight(weight)
    static_x = x.clone()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        fp8_linear_scaled_mm(static_x, fp8, None)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = fp8_linear_scaled_mm(static_x, fp8, None)
    fresh = torch.randn_like(x)
    static_x.copy_(fresh)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(static_out, fp8_linear_scaled_mm(fresh, fp8, None))
