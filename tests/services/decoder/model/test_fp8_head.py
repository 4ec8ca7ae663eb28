"""`head_quantization="fp8"` on the model: the serving path's LM head GEMM in FP8 (the aligned
head, padding rows included, quantized per vocabulary row), on the CPU reference: the values it
serves and the columns path against the full one."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from widebeam.kernels.fp8.quantize import dequantize_rows, quantize_rows, quantize_weight
from widebeam.services.decoder.config import EngineConfig, Quantization
from widebeam.services.decoder.model.fp8_linear import Fp8Linear
from widebeam.services.decoder.model.transformer import HEAD_ROW_ALIGN, CausalLM

TinyFactory = Callable[..., Path]


def _hidden(rows: int, width: int, seed: int = 0) -> torch.Tensor:  # [rows, width] bf16
    return torch.randn(rows, width, generator=torch.Generator().manual_seed(seed)).bfloat16()


@pytest.mark.parametrize("tied", [True, False])
def test_head_logits_are_the_fp8_products_of_the_aligned_head(
    tiny_model_dir: TinyFactory, tied: bool
) -> None:
    d = tiny_model_dir(num_layers=1, tie_word_embeddings=tied)
    plain = CausalLM.from_pretrained(d, dtype=torch.bfloat16, quantization="fp8")
    model = CausalLM.from_pretrained(
        d, dtype=torch.bfloat16, quantization="fp8", head_quantization="fp8"
    )
    assert plain.head_fp8 is None and plain.head_quantization == Quantization.NONE
    assert isinstance(model.head_fp8, Fp8Linear)
    assert model.head_quantization == Quantization.FP8
    vocab, width = model.config.vocab_size, model.config.hidden_size
    assert vocab % HEAD_ROW_ALIGN  # the tiny vocabulary is padded: the padding rows are FP8 too
    assert model.head_fp8.out_features == model.padded_head.shape[0]
    # the model-dtype head is still there (a tied embedding reads it)
    assert torch.equal(model.lm_head_weight, plain.lm_head_weight)

    hidden = _hidden(37, width)
    got = model.head_logits(hidden)  # [37, vocab] bf16
    assert got.shape == (37, vocab) and got.dtype == torch.bfloat16
    weight = quantize_weight(plain.lm_head_weight)
    x = quantize_rows(hidden, weight.data.shape[1])
    w = weight.data.float() * weight.scale[0, :, None]
    want = (dequantize_rows(x) @ w.t())[:, :vocab].bfloat16()
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    exact = plain.head_logits(hidden).float()
    error = float((got.float() - exact).norm() / exact.norm())
    assert 1e-3 < error < 0.1, error  # FP8 moves the logits, by what FP8 moves a GEMM


def test_column_logits_equal_the_full_heads_columns(tiny_model_dir: TinyFactory) -> None:
    d = tiny_model_dir(num_layers=1)
    model = CausalLM.from_pretrained(
        d, dtype=torch.bfloat16, quantization="fp8", head_quantization="fp8"
    )
    hidden = _hidden(11, model.config.hidden_size, seed=3)
    full = model.head_logits(hidden)
    # 21 columns: not a multiple of the FP8 GEMM's 16-row alignment, unsorted, repeated
    columns = torch.tensor([5, 0, 9, 7, 5, *range(30, 46)])
    got = model.column_logits(hidden, columns)
    assert got.shape == (11, 21)
    torch.testing.assert_close(got, full[:, columns], rtol=0, atol=0)


def test_head_quantization_without_fp8_linears_is_refused(tiny_model_dir: TinyFactory) -> None:
    with pytest.raises(ValueError, match="head_quantization fp8 needs quantization fp8"):
        CausalLM.from_pretrained(tiny_model_dir(num_layers=1), head_quantization="fp8")
    with pytest.raises(ValueError, match="head_quantization fp8 needs quantization fp8"):
        EngineConfig(model_dir="/m", head_quantization="fp8")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="head_quantization must be one of none, fp8"):
        EngineConfig(model_dir="/m", quantization="fp8", head_quantization="int8")  # type: ignore[arg-type]
    config = EngineConfig(model_dir="/m", quantization="fp8", head_quantization="fp8")  # type: ignore[arg-type]
    assert config.head_quantization is Quantization.FP8
    assert EngineConfig(model_dir="/m").head_quantization is Quantization.NONE


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_the_scaled_mm_head_is_close_to_its_fp8_reference(tiny_model_dir: TinyFactory) -> None:
    """On CUDA the head's GEMM is torch._scaled_mm (fast accumulation): within a hair of the
    exact sum of the same FP8 products; the columns path gives the full head's columns."""
    d = tiny_model_dir(num_layers=1)
    model = CausalLM.from_pretrained(
        d, dtype=torch.bfloat16, device="cuda", quantization="fp8", head_quantization="fp8"
    )
    assert model.head_fp8 is not None
    hidden = _hidden(300, model.config.hidden_size, seed=5).cuda()
    got = model.head_logits(hidden).float()
    weight = model.head_fp8.fp8_weight
    x = quantize_rows(hidden, weight.data.shape[1])
    w = weight.data.float() * weight.scale[0, :, None]
    want = (dequantize_rows(x) @ w.t())[:, : model.config.vocab_size]
    assert float((got - want).norm() / want.norm()) < 1e-2
    columns = torch.tensor([3, 1, 40, 41, 7], device="cuda")
    torch.testing.assert_close(
        model.column_logits(hidden, columns).float(), got[:, columns], rtol=2e-2, atol=2e-2
    )
