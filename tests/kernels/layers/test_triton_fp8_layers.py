"""The layer kernels that end in FP8 quantization against the layer kernel followed by the
quantization (compiled on CUDA, interpreted on the CPU): the same FP8 bytes and scales as
`triton_layers` then `triton_quantize` (what the unfused CUDA path runs) and as the torch
quantization of that layer output, the residual output unchanged; rows of mixed magnitudes, an
all-zero row, huge rows, FP8 padding, strided gate/up halves, SiLU products read whole or in
chunks (two passes)."""

from __future__ import annotations

import pytest
import torch

from widebeam.kernels.fp8.quantize import Fp8Rows, quantize_rows
from widebeam.kernels.fp8.triton_quantize import quantize_rows_triton
from widebeam.kernels.layers.dispatch import add_rms_norm_fp8, rms_norm_fp8, silu_mul_fp8
from widebeam.kernels.layers.torch_ref import add_rms_norm_ref, rms_norm_ref, silu_mul_ref

DTYPES = [torch.bfloat16, torch.float32]
# (rows, dim, FP8 width): aligned, padded to 16, padded past that (a wider GEMM input)
SHAPES = [(6, 64, 64), (5, 40, 48), (4, 40, 64)]


def _rows(rows: int, dim: int, seed: int) -> torch.Tensor:
    """Random rows of magnitudes 1e-3 .. 3e4, row 1 all zeros, row 2 with one huge element."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, dim, generator=gen) * torch.logspace(-3, 4.5, rows)[:, None]
    x[1] = 0.0
    x[2, dim // 3] = 6e4
    return x


def _assert_same_fp8(got: Fp8Rows, layer_out: torch.Tensor, cols: int) -> None:
    """`got` is `layer_out` quantized: bytes and scales as the Triton quantizer and as the torch
    reference give them (zero signs included)."""
    want = quantize_rows_triton(layer_out, cols)
    assert got.data.shape == (layer_out.shape[0], cols) and got.data.dtype == want.data.dtype
    assert got.scale.shape == (layer_out.shape[0], 1) and got.scale.dtype == torch.float32
    for expected in (want, quantize_rows(layer_out, cols)):
        assert torch.equal(got.data.view(torch.uint8), expected.data.view(torch.uint8))
        assert torch.equal(got.scale, expected.scale)
    assert (got.data[:, layer_out.shape[1] :].view(torch.uint8) == 0).all()


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_fp8(exact_device: torch.device, shape: tuple[int, int, int], dtype: torch.dtype):
    from widebeam.kernels.layers.triton_fp8_layers import rms_norm_fp8_triton
    from widebeam.kernels.layers.triton_layers import rms_norm_triton

    rows, dim, cols = shape
    x = _rows(rows, dim, sum(shape)).to(dtype).to(exact_device)
    w = (torch.rand(dim, generator=torch.Generator().manual_seed(dim)) * 40 + 0.5).to(dtype)
    w = w.to(exact_device)
    got = rms_norm_fp8_triton(x, w, 1e-6, cols)
    _assert_same_fp8(got, rms_norm_triton(x, w, 1e-6), cols)
    assert got.scale[1, 0] > 0 and (got.data[1].float() == 0).all()  # the zero row


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_add_rms_norm_fp8(
    exact_device: torch.device, shape: tuple[int, int, int], dtype: torch.dtype
) -> None:
    from widebeam.kernels.layers.triton_fp8_layers import add_rms_norm_fp8_triton
    from widebeam.kernels.layers.triton_layers import add_rms_norm_triton

    rows, dim, cols = shape
    x = _rows(rows, dim, sum(shape)).to(dtype).to(exact_device)
    residual = _rows(rows, dim, sum(shape) + 1).to(dtype).to(exact_device)
    residual[1] = -x[1]  # their sum: a zero row
    w = (torch.rand(dim, generator=torch.Generator().manual_seed(dim)) + 0.5).to(dtype)
    w = w.to(exact_device)
    got, new_residual = add_rms_norm_fp8_triton(x, residual, w, 1e-6, cols)
    normed, want_residual = add_rms_norm_triton(x, residual, w, 1e-6)
    assert torch.equal(new_residual, want_residual) and new_residual.dtype == dtype
    _assert_same_fp8(got, normed, cols)


@pytest.mark.parametrize("rows, inter, cols", [(5, 40, 48), (3, 1000, 1008), (3, 6144, 6144)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_silu_mul_fp8_of_fused_halves(
    exact_device: torch.device, rows: int, inter: int, cols: int, dtype: torch.dtype
) -> None:
    """gate and up as the halves of one gate_up GEMM output (row stride 2 x inter); the gate
    within +-60 (silu's exp stays finite), `up` carries the magnitudes and the zero row."""
    from widebeam.kernels.layers.triton_fp8_layers import silu_mul_fp8_triton
    from widebeam.kernels.layers.triton_layers import silu_mul_triton

    gate = _rows(rows, inter, inter).clamp(-60, 60)
    gate_up = torch.cat([gate, _rows(rows, inter, inter + 1)], dim=1).to(dtype)
    gate, up = gate_up.to(exact_device).split([inter, inter], dim=1)
    got = silu_mul_fp8_triton(gate, up, cols)
    _assert_same_fp8(got, silu_mul_triton(gate, up), cols)
    assert (got.data[1].float() == 0).all()


@pytest.mark.parametrize(
    ("inter", "cols", "chunks"), [(40, 48, (16, 32)), (1000, 1008, (128, 512))]
)
def test_silu_mul_fp8_in_chunks_gives_the_same_bytes(
    exact_device: torch.device, inter: int, cols: int, chunks: tuple[int, int]
) -> None:
    """A SiLU product wider than max_chunk: computed twice in chunks (for the amax, then to
    quantize; the last chunk partly padding), the bytes of one pass over the whole row."""
    from widebeam.kernels.fp8.triton_quantize import chunking
    from widebeam.kernels.layers.triton_fp8_layers import silu_mul_fp8_triton

    gate = _rows(3, inter, inter).clamp(-60, 60)
    gate_up = torch.cat([gate, _rows(3, inter, inter + 1)], dim=1).to(torch.bfloat16)
    gate, up = gate_up.to(exact_device).split([inter, inter], dim=1)
    whole = silu_mul_fp8_triton(gate, up, cols, max_chunk=8192)
    for max_chunk in chunks:
        assert not chunking(cols, max_chunk)["ONE_CHUNK"]
        chunked = silu_mul_fp8_triton(gate, up, cols, max_chunk=max_chunk)
        assert torch.equal(chunked.data.view(torch.uint8), whole.data.view(torch.uint8))
        assert torch.equal(chunked.scale, whole.scale)


@pytest.mark.parametrize("dim", [40, 64, 1000, 2048, 4096, 5120, 8192])
def test_fused_norms_launch_like_the_unfused_ones(kernel_device: torch.device, dim: int) -> None:
    """The fused norms reduce the sum of squares with the unfused kernel's block and warps: the
    reduction order follows them on the GPU (4 warps against 8 moved a few FP8 bytes in 6,144
    rows of 2,048 on the H200), which the interpreter, summing in numpy's order, cannot show."""
    from widebeam.kernels.fp8.quantize import padded
    from widebeam.kernels.layers.triton_fp8_layers import _launch
    from widebeam.kernels.layers.triton_layers import _norm_launch

    fused, unfused = _launch(dim, padded(dim), torch.device("cuda")), _norm_launch(dim)
    assert (fused["BLOCK"], fused["num_warps"]) == (unfused["BLOCK"], unfused["num_warps"])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_w3_sized_fused_kernels_equal_layer_then_quantize() -> None:
    """At the W3 shape (6,144 rows of 2,048, the MLP 6,144 wide), where the norms use several
    warps: the fused kernels' bytes and scales are the unfused path's (the bench's check)."""
    from widebeam.kernels.layers.triton_fp8_layers import (
        add_rms_norm_fp8_triton,
        rms_norm_fp8_triton,
        silu_mul_fp8_triton,
    )
    from widebeam.kernels.layers.triton_layers import (
        add_rms_norm_triton,
        rms_norm_triton,
        silu_mul_triton,
    )

    gen = torch.Generator(device="cuda").manual_seed(0)
    x, res = (torch.randn(6144, 2048, device="cuda", generator=gen).bfloat16() for _ in "xr")
    w = (torch.rand(2048, device="cuda", generator=gen) + 0.5).bfloat16()
    gate_up = (torch.randn(6144, 2 * 6144, device="cuda", generator=gen) * 3).bfloat16()
    gate, up = gate_up.split([6144, 6144], dim=1)
    pairs = [
        (rms_norm_fp8_triton(x, w, 1e-6, 2048), rms_norm_triton(x, w, 1e-6), 2048),
        (
            add_rms_norm_fp8_triton(x, res, w, 1e-6, 2048)[0],
            add_rms_norm_triton(x, res, w, 1e-6)[0],
            2048,
        ),
        (silu_mul_fp8_triton(gate, up, 6144), silu_mul_triton(gate, up), 6144),
    ]
    for got, layer_out, cols in pairs:
        want = quantize_rows_triton(layer_out, cols)
        assert torch.equal(got.data.view(torch.uint8), want.data.view(torch.uint8))
        assert torch.equal(got.scale, want.scale)


def test_narrower_fp8_width_is_refused(kernel_device: torch.device) -> None:
    from widebeam.kernels.layers.triton_fp8_layers import rms_norm_fp8_triton

    x = torch.ones(2, 32, device=kernel_device)
    with pytest.raises(ValueError, match="narrower"):
        rms_norm_fp8_triton(x, torch.ones(32, device=kernel_device), 1e-6, 16)


def test_cpu_dispatch_is_the_layer_then_quantize_rows() -> None:
    """The reference path of the `*_fp8` layers: the torch layer, then the torch quantization
    (what the FP8 GEMM's own quantization gives, the CPU path's bit-identity)."""
    x, r = _rows(4, 40, 0).to(torch.bfloat16), _rows(4, 40, 1).to(torch.bfloat16)
    w = torch.rand(40).to(torch.bfloat16) + 0.5
    for got, want in [
        (rms_norm_fp8(x, w, 1e-6, 48), quantize_rows(rms_norm_ref(x, w, 1e-6), 48)),
        (silu_mul_fp8(x, r, 48), quantize_rows(silu_mul_ref(x, r), 48)),
    ]:
        assert torch.equal(got.data.view(torch.uint8), want.data.view(torch.uint8))
        assert torch.equal(got.scale, want.scale)
    got_rows, got_residual = add_rms_norm_fp8(x, r, w, 1e-6, 48)
    normed, residual = add_rms_norm_ref(x, r, w, 1e-6)
    assert torch.equal(got_residual, residual)
    assert torch.equal(
        got_rows.data.view(torch.uint8), quantize_rows(normed, 48).data.view(torch.uint8)
    )
