"""The Triton FP8 GEMM (row-wise scales in its epilogue) against the torch reference of the same
quantized operands (interpreted on the CPU, compiled on CUDA): every tile configuration the
bench tries, unaligned and tiny shapes, fp32 and bf16 output, the per-shape choice of path in
`backend.gemm_for_weight`, and on CUDA a captured call."""

from __future__ import annotations

import pytest
import torch

from widebeam.kernels.fp8 import backend
from widebeam.kernels.fp8.quantize import Fp8Rows, Fp8Weight, quantize_rows, quantize_weight
from widebeam.kernels.fp8.torch_ref import fp8_matmul_ref

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _operands(tokens: int, k: int, n: int, seed: int) -> tuple[Fp8Rows, Fp8Weight]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, k, generator=gen) * torch.logspace(-2, 2, tokens)[:, None]
    weight = torch.randn(n, k, generator=gen) / k**0.5
    fp8 = quantize_weight(weight.to(DEVICE))
    return quantize_rows(x.to(torch.bfloat16).to(DEVICE), fp8.data.shape[1]), fp8


def _assert_matches_reference(got: torch.Tensor, rows: Fp8Rows, weight: Fp8Weight) -> None:
    """The same FP8 products summed in another order: fp32 agrees to rounding; a bf16 output
    may differ in its last place (a sum on either side of a rounding edge)."""
    want = fp8_matmul_ref(rows, weight, None, got.dtype)
    assert got.shape == want.shape and got.dtype == want.dtype and got.is_contiguous()
    largest = float(want.abs().max()) if want.numel() else 0.0
    tol = 1e-5 if got.dtype == torch.float32 else 2**-7
    torch.testing.assert_close(got, want, rtol=tol, atol=tol * largest)


@pytest.mark.parametrize("config_index", range(8))
def test_every_bench_config_matches_the_reference(kernel_device: torch.device, config_index):
    from widebeam.kernels.fp8.triton_gemm import CONFIGS, triton_fp8_matmul

    rows, weight = _operands(70, 384, 200, config_index)  # 200 outputs: padded to 208
    got = triton_fp8_matmul(rows, weight, None, torch.float32, CONFIGS[config_index])
    _assert_matches_reference(got, rows, weight)


@pytest.mark.parametrize("shape", [(1, 16, 16), (5, 48, 40), (33, 256, 100), (0, 32, 16)])
@pytest.mark.parametrize("persistent", [False, True])
def test_small_tiles_and_shapes(kernel_device: torch.device, shape, persistent: bool) -> None:
    from widebeam.kernels.fp8.triton_gemm import TileConfig, triton_fp8_matmul

    config = TileConfig(16, 32, 32, num_warps=4, num_stages=2, persistent=persistent)
    rows, weight = _operands(*shape, seed=sum(shape))
    for dtype in (torch.float32, torch.bfloat16):
        got = triton_fp8_matmul(rows, weight, None, dtype, config)
        _assert_matches_reference(got, rows, weight)


def test_default_config_uses_64_row_tiles_below_a_wave(kernel_device: torch.device) -> None:
    from widebeam.kernels.fp8.triton_gemm import CONFIGS, default_config

    assert default_config(512, 2048, 132).block_m == 64  # 4 x 16 = 64 tiles of 128 x 128
    assert default_config(6144, 2048, 132) is CONFIGS[0]
    rows, weight = _operands(3, 64, 32, 0)
    from widebeam.kernels.fp8.triton_gemm import triton_fp8_matmul

    _assert_matches_reference(triton_fp8_matmul(rows, weight, None, torch.float32), rows, weight)


def test_listed_shapes_take_the_triton_gemm_from_their_row_count(
    kernel_device: torch.device, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gemm_for_weight: SCALED_MM unchanged for unlisted shapes and other paths; a listed shape
    runs torch._scaled_mm below its row count (implemented on the CPU too) and Triton from it."""
    rows, weight = _operands(40, 64, 48, 1)
    assert backend.gemm_for_weight(backend.SCALED_MM, weight) is backend.SCALED_MM
    monkeypatch.setitem(backend.TRITON_FROM_ROWS, (48, 64), 32)
    assert backend.gemm_for_weight(backend.TORCH_REFERENCE, weight) is backend.TORCH_REFERENCE
    chosen = backend.gemm_for_weight(backend.SCALED_MM, weight)
    assert chosen.name == "scaled_mm|triton>=32"
    calls: list[int] = []
    monkeypatch.setattr(
        backend, "_triton_rows", lambda r, *args: calls.append(len(r.data)) or _triton(r, *args)
    )
    for tokens in (40, 8):
        part = Fp8Rows(rows.data[:tokens], rows.scale[:tokens])
        _assert_matches_reference(chosen.matmul(part, weight, None, torch.bfloat16), part, weight)
    assert calls == [40]


def _triton(rows: Fp8Rows, weight: Fp8Weight, bias: torch.Tensor | None, dtype: torch.dtype):
    from widebeam.kernels.fp8.triton_gemm import triton_fp8_matmul

    return triton_fp8_matmul(rows, weight, bias, dtype)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("shape", [(6144, 2048, 2048), (512, 6144, 2048), (300, 2048, 12288)])
def test_w3_shapes_on_cuda(shape: tuple[int, int, int]) -> None:
    rows, weight = _operands(*shape, seed=0)
    got = _triton(rows, weight, None, torch.bfloat16)
    _assert_matches_reference(got, rows, weight)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_triton_gemm_is_captured_by_a_cuda_graph() -> None:
    rows, weight = _operands(256, 512, 384, 3)
    static = Fp8Rows(rows.data.clone(), rows.scale.clone())
    _triton(static, weight, None, torch.bfloat16)  # compiled before the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = _triton(static, weight, None, torch.bfloat16)
    fresh, _ = _operands(256, 512, 384, 4)
    static.data.copy_(fresh.data)
    static.scale.copy_(fresh.scale)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, _triton(fresh, weight, None, torch.bfloat16))
