"""`quantization="fp8"` applied to a loaded model: every decoder layer's linear layers (the fused
q/k/v and gate/up GEMMs, o_proj, down_proj) become `Fp8Linear`s; the embeddings and the norms
stay in the model dtype, and so does the LM head unless `head_quantization="fp8"`
(`quantize_head`: an FP8 copy of it beside the model-dtype weight, which a tied embedding
still needs).

A layer whose weights the checkpoint already holds in FP8 per channel (`prequantized`, by module
name, e.g. ``model.layers.0.self_attn.q_proj``) keeps those weights and scales as they are; the
others are quantized here from the model-dtype weights. Rows quantize independently, so a fused
weight is the concatenation of its parts'. FP8 weights of other modules (an LM head a checkpoint
quantized) are not used: the model holds them dequantized.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import nn

from widebeam.kernels.fp8.backend import Fp8Gemm, gemm_for_weight
from widebeam.kernels.fp8.quantize import Fp8Weight, concat_weights, quantize_weight
from widebeam.services.decoder.model.fp8_linear import Fp8Linear


def quantize_fp8(
    model: nn.Module,  # a CausalLM after fuse_projections
    gemm: Fp8Gemm,
    prequantized: Mapping[str, Fp8Weight] | None = None,
) -> None:
    """Replace the decoder layers' linears by FP8 ones, in place; the model-dtype weights they
    held are freed."""
    given = dict(prequantized or {})
    dtype = model.model.embed_tokens.weight.dtype
    for index, layer in enumerate(model.model.layers):
        prefix = f"model.layers.{index}"
        attn, mlp = layer.self_attn, layer.mlp
        attn.qkv_fp8 = _fused(
            attn, ("q_proj", "k_proj", "v_proj"), f"{prefix}.self_attn", given, gemm, dtype
        )
        attn.qkv_weight, attn.qkv_bias = None, None
        attn.register_module(
            "o_proj", _single(attn.o_proj, f"{prefix}.self_attn.o_proj", given, gemm, dtype)
        )
        mlp.gate_up_fp8 = _fused(mlp, ("gate_proj", "up_proj"), f"{prefix}.mlp", given, gemm, dtype)
        mlp.gate_up_weight, mlp.gate_up_bias = None, None
        mlp.register_module(
            "down_proj", _single(mlp.down_proj, f"{prefix}.mlp.down_proj", given, gemm, dtype)
        )


def _weight(linear: nn.Linear, name: str, given: dict[str, Fp8Weight]) -> Fp8Weight:
    found = given.pop(name, None)
    if found is None:
        return quantize_weight(linear.weight)
    if (found.out_features, found.in_features) != tuple(linear.weight.shape):
        raise ValueError(
            f"{name}: FP8 weight is {found.out_features}x{found.in_features}, the model's "
            f"{tuple(linear.weight.shape)}"
        )
    return found


def _fused(
    module: nn.Module,
    names: Sequence[str],
    prefix: str,
    given: dict[str, Fp8Weight],
    gemm: Fp8Gemm,
    dtype: torch.dtype,
) -> Fp8Linear:
    """One FP8 linear over the named linears' output channels; the linears are removed (the
    quantized model runs the fused GEMM only)."""
    linears: list[nn.Linear] = [getattr(module, n) for n in names]
    weight = concat_weights(
        [_weight(lin, f"{prefix}.{n}", given) for lin, n in zip(linears, names, strict=True)]
    )
    bias = None
    if linears[0].bias is not None:
        bias = torch.cat([lin.bias for lin in linears])
    for n in names:
        module.register_module(n, None)
    return Fp8Linear(weight, bias, gemm_for_weight(gemm, weight), dtype)


def _single(
    linear: nn.Linear, name: str, given: dict[str, Fp8Weight], gemm: Fp8Gemm, dtype: torch.dtype
) -> Fp8Linear:
    weight = _weight(linear, name, given)
    return Fp8Linear(weight, linear.bias, gemm_for_weight(gemm, weight), dtype)


def quantize_head(
    weight: torch.Tensor,  # [rows, hidden] model dtype: the LM head, rows padded (align_head)
    gemm: Fp8Gemm,
) -> Fp8Linear:
    """The LM head as an FP8 linear over all of `weight`'s rows, padding included, so its GEMM
    writes the aligned width and the caller slices the vocabulary off as a view."""
    fp8 = quantize_weight(weight)
    return Fp8Linear(fp8, None, gemm_for_weight(gemm, fp8), weight.dtype)
