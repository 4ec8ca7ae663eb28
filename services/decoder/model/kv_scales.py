"""The static FP8 KV scales of a model (`kv_dtype="fp8"`): one fp32 scale per layer and KV
head for K, one for V, fixed when the model loads (a scale that changed while requests run
would change what every earlier slot means).

Where they come from, per layer and per K / V:

- the checkpoint's, when it has them, in the names the HF ecosystem writes:
  ``model.layers.N.self_attn.k_scale`` / ``v_scale`` (compressed-tensors, vLLM, transformers),
  the older ``self_attn.kv_scale`` (one for both) and ModelOpt's
  ``self_attn.k_proj.k_scale`` / ``self_attn.v_proj.v_scale``; one value (per tensor) or one per
  KV head (compressed-tensors' ``attn_head``). A ``q_scale`` is dropped: queries stay in the
  model dtype.
- otherwise a bound derived from the weights: the largest value the layer's K (V) head can
  take for any input, divided by 448, so nothing saturates. Every layer's attention input is an
  RMSNorm's output ``n * w`` with ``|n|_2 <= sqrt(hidden)``, so by Cauchy-Schwarz an output
  channel ``j`` of a projection ``W`` is at most ``sqrt(hidden) * |W[j] * w|_2 + |bias[j]|``. With
  a per-head q/k norm (Qwen3) a key head is ``n * w_k`` with ``|n|_2 <= sqrt(head_dim)``: at most
  ``sqrt(head_dim) * max|w_k|``. Rope rotates channel pairs (i, i + head_dim / 2), so a key
  channel is bounded by the pair's bounds' root sum of squares. No calibration data, the same
  scales on every device, known before the first KV is written (the warm-up's too).

The bound is loose (it assumes every input aligns with its weights), which costs little: e4m3
is a floating-point format whose relative precision (3 mantissa bits) does not depend on the
scale for values above 2^-6 × scale, i.e. down to 1/28672 of the bound. Values past the
bound (rounding of the model-dtype or FP8 GEMMs, a checkpoint scale that is too small)
saturate at ±448 × scale (`widebeam/kernels/kv/fp8_kv.py`).
"""

from __future__ import annotations

import math
import re

import torch
from torch import nn

from widebeam.kernels.fp8.quantize import FP8_MAX, MIN_SCALE
from widebeam.kernels.kv.fp8_kv import KvScales
from widebeam.services.decoder.model.config import ModelConfig
from widebeam.services.decoder.model.weights import CheckpointError

# layer, module path, scale name: K and V scales in the checkpoint layouts listed above
_SCALE = re.compile(r"model\.layers\.(\d+)\.self_attn\.(?:(k_proj|v_proj)\.)?(k|v|kv|q)_scale")


class CheckpointKvScales:
    """The KV scales a checkpoint holds, per layer: [kv_heads] fp32 each."""

    def __init__(self) -> None:
        self.k: dict[int, torch.Tensor] = {}
        self.v: dict[int, torch.Tensor] = {}

    def __bool__(self) -> bool:
        return bool(self.k or self.v)


def pop_kv_scales(
    state: dict[str, torch.Tensor], config: ModelConfig
) -> tuple[dict[str, torch.Tensor], CheckpointKvScales]:
    """(the state without its KV scale tensors, those scales per layer)."""
    found = CheckpointKvScales()
    rest: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        match = _SCALE.fullmatch(name)
        if match is None:
            rest[name] = tensor
            continue
        layer, module, kind = int(match[1]), match[2], match[3]
        if module is not None and module[0] != kind:  # e.g. k_proj.v_scale: not a KV scale
            raise CheckpointError(f"unexpected KV scale tensor {name!r}")
        if kind == "q":
            continue
        if not 0 <= layer < config.num_hidden_layers:
            raise CheckpointError(f"{name!r}: the model has {config.num_hidden_layers} layers")
        heads = _per_head(name, tensor, config.num_key_value_heads)
        targets = {"k": (found.k,), "v": (found.v,), "kv": (found.k, found.v)}[kind]
        for target in targets:
            if layer in target:
                raise CheckpointError(f"{name!r}: layer {layer} has this scale twice")
            target[layer] = heads
    return rest, found


def _per_head(name: str, tensor: torch.Tensor, kv_heads: int) -> torch.Tensor:  # [kv_heads] fp32
    values = tensor.detach().float().reshape(-1)
    if values.numel() == 1:
        values = values.expand(kv_heads)
    elif values.numel() != kv_heads:
        raise CheckpointError(
            f"{name!r} has shape {tuple(tensor.shape)}: expected one scale or one per KV head "
            f"({kv_heads})"
        )
    if not bool(torch.isfinite(values).all()) or not bool((values > 0).all()):
        raise CheckpointError(f"{name!r}: KV scales must be positive and finite")
    return values.contiguous()


def kv_scales_for(model: nn.Module, checkpoint: CheckpointKvScales | None = None) -> KvScales:
    """Tables [layers, kv_heads] fp32 on the model's device: the checkpoint's scales where it
    has them, the weight bound elsewhere. `model`: a CausalLM in the model dtype (before its
    linears are replaced by FP8 ones)."""
    layers = model.model.layers
    k_rows, v_rows = [], []
    for index, layer in enumerate(layers):
        attn = layer.self_attn
        norm = layer.input_layernorm.weight.float()  # [hidden]
        given_k = checkpoint.k.get(index) if checkpoint else None
        given_v = checkpoint.v.get(index) if checkpoint else None
        k = _key_bound(attn, norm) / FP8_MAX if given_k is None else given_k.to(norm.device)
        v = _value_bound(attn, norm) / FP8_MAX if given_v is None else given_v.to(norm.device)
        k_rows.append(k.clamp(min=MIN_SCALE))
        v_rows.append(v.clamp(min=MIN_SCALE))
    return KvScales.of(torch.stack(k_rows), torch.stack(v_rows))


def _channel_bounds(
    projection: nn.Linear, norm: torch.Tensor
) -> torch.Tensor:  # [out] fp32, |output channel| for any input
    weight = projection.weight.float() * norm[None, :]
    bound = torch.linalg.vector_norm(weight, dim=1) * math.sqrt(norm.shape[0])
    if projection.bias is not None:
        bound = bound + projection.bias.float().abs()
    return bound


def _value_bound(attn: nn.Module, norm: torch.Tensor) -> torch.Tensor:  # [kv_heads] fp32
    bound = _channel_bounds(attn.v_proj, norm).view(attn.n_kv_heads, attn.head_dim)
    return bound.amax(dim=1)


def _key_bound(attn: nn.Module, norm: torch.Tensor) -> torch.Tensor:  # [kv_heads] fp32
    heads, dim = attn.n_kv_heads, attn.head_dim
    if attn.k_norm is not None:  # the head's own norm bounds it whatever came before
        per_channel = attn.k_norm.weight.float().abs().max() * math.sqrt(dim)
        return per_channel.expand(heads).clone()
    bound = _channel_bounds(attn.k_proj, norm).view(heads, dim)
    half = dim // 2
    paired = torch.cat([bound[:, half:], bound[:, :half]], dim=1)  # rope's partner channel
    return torch.sqrt(bound**2 + paired**2).amax(dim=1)
