"""A linear layer served in FP8 (W8A8): the weight quantized per output channel, activations
per token at each call, the GEMM on the path `widebeam/kernels/fp8/backend.py` chose for the device.

Its input is either model-dtype activations, which it quantizes, or rows the previous layer
kernel already quantized (`Fp8Rows`, `quantized_input_cols` tells that kernel the width): the
same values either way, one pass over the activations fewer in the second."""

from __future__ import annotations

import torch
from torch import nn

from widebeam.kernels.fp8.backend import Fp8Gemm
from widebeam.kernels.fp8.quantize import Fp8Rows, Fp8Weight, weight_from_rows

# A linear layer's input: model-dtype activations, or activations quantized for an FP8 GEMM.
Activation = torch.Tensor | Fp8Rows


class Fp8Linear(nn.Module):
    def __init__(
        self,
        weight: Fp8Weight,
        bias: torch.Tensor | None,
        gemm: Fp8Gemm,
        dtype: torch.dtype,  # the model dtype: the output's, whatever the input
    ) -> None:
        super().__init__()
        self.in_features = weight.in_features
        self.out_features = weight.out_features
        self.gemm = gemm
        self.dtype = dtype
        # Whether the layer before takes this linear's quantization over (the serving default;
        # False: it hands model-dtype activations, the unfused path the fused one is tested on).
        self.fused_input = True
        self.register_buffer("weight", weight.data)  # [padded out, padded in] float8_e4m3fn
        self.register_buffer("weight_scale", weight.scale)  # [1, padded out] fp32
        self.register_buffer("bias", bias)  # [out] model dtype, or None

    @property
    def fp8_weight(self) -> Fp8Weight:
        return Fp8Weight(self.weight, self.weight_scale, self.out_features, self.in_features)

    def forward(self, x: Activation) -> torch.Tensor:  # [..., in] -> [..., out]
        if isinstance(x, Fp8Rows):  # [tokens, padded in] -> [tokens, out]
            return self.gemm.matmul(x, self.fp8_weight, self.bias, self.dtype)
        flat = x.reshape(-1, self.in_features)
        out = self.gemm.linear(flat, self.fp8_weight, self.bias)
        return out.view(*x.shape[:-1], self.out_features)

    def output_columns(
        self,
        x: torch.Tensor,  # [tokens, in] model dtype
        outputs: torch.Tensor,  # [C] int64 output channels
    ) -> torch.Tensor:  # [tokens, C] model dtype
        """The listed output channels only: their weight rows and scales gathered (bytes, as
        FP8 has no arithmetic to do here), then one small GEMM with the same values per
        channel as the full one."""
        data = self.weight.view(torch.uint8).index_select(0, outputs).view(self.weight.dtype)
        scale = self.weight_scale[0].index_select(0, outputs)
        weight = weight_from_rows(data, scale, self.in_features)
        bias = None if self.bias is None else self.bias.index_select(0, outputs)
        return self.gemm.linear(x, weight, bias)

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, gemm={self.gemm.name}"


def quantized_input_cols(linear: nn.Module | None) -> int | None:
    """The FP8 width the layer before `linear` should quantize its output to (the GEMM's padded
    input width), or None when `linear` takes model-dtype activations."""
    if isinstance(linear, Fp8Linear) and linear.fused_input:
        return int(linear.weight.shape[1])
    return None


def set_fused_inputs(model: nn.Module, fused: bool) -> None:
    """Every FP8 linear of `model` takes quantized rows from the layer before (True) or
    model-dtype activations it quantizes itself (False); the results are the same."""
    for module in model.modules():
        if isinstance(module, Fp8Linear):
            module.fused_input = fused
