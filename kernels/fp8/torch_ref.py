"""The FP8 linear in plain torch: activations quantized per token exactly as the CUDA path does,
then both operands dequantized to fp32 and multiplied. `torch._scaled_mm` computes the same sum
(FP8 products accumulated in fp32, scales applied to the result), so this is its oracle and the
CPU path."""

from __future__ import annotations

import torch

from widebeam.kernels.fp8.quantize import Fp8Weight, quantize_rows


def fp8_linear_ref(
    x: torch.Tensor,  # [tokens, in] model dtype
    weight: Fp8Weight,
    bias: torch.Tensor | None,  # [out] model dtype
) -> torch.Tensor:  # [tokens, out] model dtype
    rows = quantize_rows(x, weight.data.shape[1])
    product = rows.data.float() @ weight.data.float().t()  # [tokens, padded out] fp32
    out = (product * rows.scale * weight.scale)[:, : weight.out_features].to(x.dtype)
    return out if bias is None else out + bias
