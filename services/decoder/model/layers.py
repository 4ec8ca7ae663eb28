"""Building blocks shared by the supported decoder families.

Rope itself (HF's ``x * cos + rotate_half(x) * sin``) lives in widebeam/kernels/layers with the
q/k norm it is fused with: ``qk_norm_rope``; this module computes its cos/sin tables."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from widebeam.kernels.layers.dispatch import (
    add_rms_norm,
    add_rms_norm_fp8,
    rms_norm,
    rms_norm_fp8,
    silu_mul,
    silu_mul_fp8,
)
from widebeam.services.decoder.model.config import RopeScaling
from widebeam.services.decoder.model.fp8_linear import Activation, quantized_input_cols


class RMSNorm(nn.Module):
    """RMSNorm computed in fp32, with the weight applied after casting back (HF's order, which
    matters for bf16 parity).

    `fp8_cols` (an int): the norm feeds an FP8 GEMM that takes quantized rows of that width
    (`fp8_linear.quantized_input_cols`); the output is then those rows (`Fp8Rows`), quantized
    by the norm's own kernel on CUDA."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor, fp8_cols: int | None = None) -> Activation:  # [N, dim]
        if fp8_cols is not None:
            return rms_norm_fp8(x, self.weight, self.eps, fp8_cols)
        return rms_norm(x, self.weight, self.eps)  # one fused kernel on CUDA

    def add_forward(
        self,
        x: torch.Tensor,  # [..., dim] a sublayer's output
        residual: torch.Tensor,  # [..., dim] the residual stream so far
        fp8_cols: int | None = None,
    ) -> tuple[Activation, torch.Tensor]:  # (norm(x + residual), x + residual)
        """The residual add fused into this norm: the same arithmetic as ``forward(x + residual)``
        (the sum stored in the model dtype), one kernel on CUDA."""
        if fp8_cols is not None:
            return add_rms_norm_fp8(x, residual, self.weight, self.eps, fp8_cols)
        return add_rms_norm(x, residual, self.weight, self.eps)


def rope_inv_freq(head_dim: int, theta: float, scaling: RopeScaling | None) -> torch.Tensor:
    """Inverse frequencies [head_dim // 2] in fp32, following transformers' rope_utils."""
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64, device="cpu").float() / head_dim
    inv_freq = 1.0 / (theta**exponents)
    if scaling is None:
        return inv_freq
    if scaling.rope_type == "linear":
        return inv_freq / scaling.factor
    if scaling.rope_type == "llama3":
        return _llama3_scale(inv_freq, scaling)
    raise ValueError(f"unsupported rope type {scaling.rope_type!r}")


def _llama3_scale(inv_freq: torch.Tensor, s: RopeScaling) -> torch.Tensor:
    assert s.low_freq_factor is not None and s.high_freq_factor is not None
    assert s.original_max_position_embeddings is not None
    old_ctx = s.original_max_position_embeddings
    low_wavelen = old_ctx / s.low_freq_factor
    high_wavelen = old_ctx / s.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    # Long wavelengths are stretched by `factor`, short ones untouched, the band between blended.
    scaled = torch.where(wavelen > low_wavelen, inv_freq / s.factor, inv_freq)
    smooth = (old_ctx / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)
    smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled
    is_medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(is_medium, smoothed, scaled)


class RotaryEmbedding(nn.Module):
    """cos/sin tables for arbitrary (ragged, per-token) positions.

    inv_freq is a plain attribute, not a buffer, so ``module.to(bfloat16)`` cannot degrade it and
    it never shows up in the state dict.
    """

    def __init__(self, head_dim: int, theta: float, scaling: RopeScaling | None) -> None:
        super().__init__()
        self.head_dim = head_dim
        self._inv_freq_cpu = rope_inv_freq(head_dim, theta, scaling)
        self._inv_freq_by_device: dict[torch.device, torch.Tensor] = {}

    def _inv_freq(self, device: torch.device) -> torch.Tensor:
        cached = self._inv_freq_by_device.get(device)
        if cached is None:
            cached = self._inv_freq_cpu.to(device)
            self._inv_freq_by_device[device] = cached
        return cached

    def forward(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """positions [N] int64 -> (cos, sin), each [N, head_dim] fp32."""
        freqs = positions.float()[:, None] * self._inv_freq(positions.device)[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()


def fuse_rows(linears: Sequence[nn.Linear]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One weight [sum of outputs, in] (and bias) holding `linears`' parameters one after the
    other, each linear's parameters rebound as views of it: one GEMM computes them all, and the
    weights stay in memory once. The modules keep their names and shapes (checkpoints load and
    save unchanged)."""
    weight = torch.cat([lin.weight for lin in linears])
    bias = None if linears[0].bias is None else torch.cat([lin.bias for lin in linears])
    start = 0
    for lin in linears:
        rows = lin.weight.shape[0]
        grad = lin.weight.requires_grad
        lin.weight = nn.Parameter(weight[start : start + rows], requires_grad=grad)
        if bias is not None:
            lin.bias = nn.Parameter(bias[start : start + rows], requires_grad=grad)
        start += rows
    return weight, bias


def fused_applies(weight: torch.Tensor | None, param: torch.Tensor) -> bool:
    """The fused GEMM serves inference; when a gradient is wanted (the demo's training) the
    linears run on their own parameters, which autograd tracks."""
    return weight is not None and not (torch.is_grad_enabled() and param.requires_grad)


class SwiGLU(nn.Module):
    def __init__(self, hidden_size: int, intermediate_size: int, bias: bool = False) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=bias)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=bias)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=bias)
        self.register_buffer("gate_up_weight", None, persistent=False)  # [2 I, hidden]
        self.register_buffer("gate_up_bias", None, persistent=False)
        # quantization="fp8": the fused gate/up GEMM in FP8 (gate/up_proj are then removed)
        self.gate_up_fp8: nn.Module | None = None

    def fuse_projections(self) -> None:
        self.gate_up_weight, self.gate_up_bias = fuse_rows([self.gate_proj, self.up_proj])

    def forward(self, x: Activation) -> torch.Tensor:  # [N, hidden] (or its FP8 rows)
        if self.gate_up_fp8 is not None:
            gate, up = self.gate_up_fp8(x).chunk(2, dim=1)
        else:
            assert isinstance(x, torch.Tensor), "FP8 rows fed a model-dtype GEMM"
            if fused_applies(self.gate_up_weight, self.gate_proj.weight):
                gate_up = F.linear(x, self.gate_up_weight, self.gate_up_bias)  # [N, 2 I]
                gate, up = gate_up.chunk(2, dim=1)
            else:
                gate, up = self.gate_proj(x), self.up_proj(x)
        cols = quantized_input_cols(self.down_proj)
        act = silu_mul(gate, up) if cols is None else silu_mul_fp8(gate, up, cols)
        return self.down_proj(act)
