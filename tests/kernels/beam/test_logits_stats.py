"""The Triton logits-stats kernel against the torch reference on random rows (compiled on CUDA,
interpreted on the CPU): ragged vocabularies, -inf entries and rows, bf16 and fp32."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from widebeam.kernels.beam.logits_stats import LogitsStats, logits_stats_torch

Stats = Callable[..., LogitsStats]


@pytest.fixture(scope="module")
def triton_stats() -> Stats:
    from widebeam.kernels.beam.triton_logits_stats import logits_stats_triton

    return logits_stats_triton


@pytest.mark.parametrize(
    ("rows", "vocab", "block"), [(3, 5000, 64), (7, 4096, 64), (2, 300, 16), (1, 70, 64)]
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matches_reference(
    triton_stats: Stats,
    kernel_device: torch.device,
    rows: int,
    vocab: int,
    block: int,
    dtype: torch.dtype,
) -> None:
    gen = torch.Generator().manual_seed(rows * vocab)
    x = (torch.randn(rows, vocab, generator=gen) * 4).to(dtype)
    x[0, ::5] = float("-inf")
    if rows > 2:
        x[2] = float("-inf")  # an all-masked row: lse -inf, no NaN
    x = x.to(kernel_device)
    want = logits_stats_torch(x, block)
    got = triton_stats(x, block)
    torch.testing.assert_close(got.lse, want.lse, rtol=1e-5, atol=1e-5)
    assert torch.equal(got.block_max, want.block_max)
    assert not torch.isnan(got.lse).any()
    assert triton_stats(x, block, blocks=False).block_max is None


def test_strided_rows_of_a_wider_matrix(triton_stats: Stats, kernel_device: torch.device) -> None:
    x = torch.randn(4, 1000, generator=torch.Generator().manual_seed(1)).to(kernel_device)
    view = x[:, :900]  # row stride 1000, unit column stride
    got = triton_stats(view, 64)
    want = logits_stats_torch(view.contiguous(), 64)
    torch.testing.assert_close(got.lse, want.lse, rtol=1e-5, atol=1e-5)
    assert torch.equal(got.block_max, want.block_max)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("rows", [1, 256, 883])
def test_qwen_vocab_on_gpu(triton_stats: Stats, rows: int) -> None:
    """The benchmark shape: Qwen's 151,936-token vocabulary in bf16, a chunk of beam rows."""
    gen = torch.Generator(device="cuda").manual_seed(rows)
    x = (torch.randn(rows, 151936, device="cuda", generator=gen) * 3).to(torch.bfloat16)
    want = logits_stats_torch(x)
    got = triton_stats(x)
    torch.testing.assert_close(got.lse, want.lse, rtol=1e-5, atol=1e-5)
    assert torch.equal(got.block_max, want.block_max)
