"""A linear layer served in FP8 (W8A8): the weight quantized per output channel, activations
per token at each call, the GEMM on the path `kernels/fp8/backend.py` chose for the device."""

from __future__ import annotations

import torch
from torch import nn

from widebeam.kernels.fp8.backend import Fp8Gemm
from widebeam.kernels.fp8.quantize import Fp8Weight


class Fp8Linear(nn.Module):
    def __init__(self, weight: Fp8Weight, bias: torch.Tensor | None, gemm: Fp8Gemm) -> None:
        super().__init__()
        self.in_features = weight.in_features
        self.out_features = weight.out_features
        self.gemm = gemm
        self.register_buffer("weight", weight.data)  # [padded out, padded in] float8_e4m3fn
        self.register_buffer("weight_scale", weight.scale)  # [1, padded out] fp32
        self.register_buffer("bias", bias)  # [out] model dtype, or None

    @property
    def fp8_weight(self) -> Fp8Weight:
        return Fp8Weight(self.weight, self.weight_scale, self.out_features, self.in_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [..., in] -> [..., out]
        flat = x.reshape(-1, self.in_features)
        out = self.gemm.linear(flat, self.fp8_weight, self.bias)
        return out.view(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, gemm={self.gemm.name}"
