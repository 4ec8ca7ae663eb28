"""The FP8 linear in plain torch: activations quantized per token exactly as the CUDA path does,
then both operands dequantized to fp32 and multiplied. `torch._scaled_mm` computes the same sum
(FP8 products accumulated in fp32, scales applied to the result), so this is its oracle and the
CPU path."""

from __future__ import annotations

import torch

from widebeam.kernels.fp8.quantize import Fp8Rows, Fp8Weight, quantize_rows


def fp8_matmul_ref(
    rows: Fp8Rows,  # activations already quantized: [tokens, padded in]
    weight: Fp8Weight,
    bias: torch.Tensor | None,  # [out] model dtype
    out_dtype: torch.dtype,  # the model dtype
) -> torch.Tensor:  # [tokens, out] out_dtype
    product = rows.data.float() @ weight.data.float().t()  # [tokens, padded out] fp32
    out = (product * rows.scale * weight.scale)[:, : weight.out_features].to(out_dtype)
    return out if bias is None else out + bias


def fp8_linear_ref(
    x: torch.Tensor,  # [tokens, in] model dtype
    weight: Fp8Weight,
    bias: torch.Tensor | None,  # [out] model dtype
) -> torch.Tensor:  # [tokens, out] model dtype
    return fp8_matmul_ref(quantize_rows(x, weight.data.shape[1]), weight, bias, x.dtype)
