"""Checkpoints whose linear weights are already FP8, in the two layouts of the HF ecosystem.

- transformers' fine-grained FP8 (``quantization_config.quant_method == "fp8"``, e.g. the
  Qwen3-*-FP8 checkpoints): ``X.weight`` float8_e4m3fn ``[out, in]`` and
  ``X.weight_scale_inv`` fp32 ``[ceil(out / bn), ceil(in / bk)]`` for
  ``weight_block_size: [bn, bk]`` (a scalar without a block size: one scale per tensor); the
  weight is ``weight * scale_inv`` block by block.
- compressed-tensors (``quant_method == "compressed-tensors"``, ``format: "float-quantized"``):
  ``X.weight`` float8_e4m3fn and ``X.weight_scale`` ``[out, 1]`` (strategy ``channel``), one
  value (``tensor``) or ``[ceil(out / bn), ceil(in / bk)]`` (``block``, ``block_structure``).

Per-channel and per-tensor scales load as they are (a tensor scale is every channel's scale).
Block scales are dequantized to fp32 and quantized again per channel: the serving GEMMs scale by
row, not by block. Every weight also comes back dequantized in the model dtype, for the modules
served in it (the LM head, ``quantization="none"``). Activation scales are computed per token at
run time, so checkpoints with static activation scales or zero points are refused, naming what
is unsupported. A compressed-tensors ``kv_cache_scheme`` (static 8-bit float, per tensor or per
attention head; with or without quantized weights) is accepted: its ``k_scale`` / ``v_scale``
tensors are the FP8 KV cache's (`kv_scales.py`), used with ``kv_dtype="fp8"``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from widebeam.kernels.fp8.quantize import FP8_DTYPE, Fp8Weight, quantize_weight, weight_from_rows
from widebeam.services.decoder.model.weights import CheckpointError

TRANSFORMERS_FP8 = "fp8"
COMPRESSED_TENSORS = "compressed-tensors"
_SUPPORTED = f"{TRANSFORMERS_FP8!r} (transformers) or {COMPRESSED_TENSORS!r} with FP8 weights"


@dataclass(frozen=True)
class Fp8Layout:
    """How a checkpoint stores its FP8 weights' scales."""

    method: str  # TRANSFORMERS_FP8 or COMPRESSED_TENSORS
    scale_suffix: str  # the scale tensor's name after the module's: "weight_scale(_inv)"
    # [bn, bk] scale blocks; None: per channel or per tensor, told by the scale's shape
    block: tuple[int, int] | None
    per_channel: bool  # the scales are [out, 1] (compressed-tensors' "channel")


def read_fp8_layout(path: str | Path) -> Fp8Layout | None:
    """The FP8 layout config.json's ``quantization_config`` declares (None: not quantized)."""
    root = Path(path)
    file = root / "config.json" if root.is_dir() else root
    with file.open() as fh:
        raw = json.load(fh)
    config = raw.get("quantization_config")
    if config is None:
        return None
    if not isinstance(config, dict):
        raise CheckpointError(f"{file}: quantization_config must be an object")
    method = config.get("quant_method")
    if method == TRANSFORMERS_FP8:
        return _transformers_layout(config)
    if method == COMPRESSED_TENSORS:
        return _compressed_tensors_layout(config)
    raise CheckpointError(
        f"quantization_config.quant_method {method!r} is not supported; supported: {_SUPPORTED}"
    )


def _unsupported(what: str) -> CheckpointError:
    return CheckpointError(f"unsupported FP8 checkpoint: {what}")


def _block(value: Any, key: str) -> tuple[int, int] | None:
    if value is None:
        return None
    if not (
        isinstance(value, list)
        and len(value) == 2
        and all(isinstance(v, int) and v > 0 for v in value)
    ):
        raise _unsupported(f"{key} must be two positive integers, got {value!r}")
    return int(value[0]), int(value[1])


def _transformers_layout(config: dict[str, Any]) -> Fp8Layout:
    if config.get("fmt", "e4m3") != "e4m3":
        raise _unsupported(f"fmt {config.get('fmt')!r} (only 'e4m3')")
    if config.get("activation_scheme", "dynamic") != "dynamic":
        raise _unsupported(
            f"activation_scheme {config.get('activation_scheme')!r} (activations are quantized "
            "per token at run time: only 'dynamic')"
        )
    if config.get("scale_fmt", "float") != "float":
        raise _unsupported(f"scale_fmt {config.get('scale_fmt')!r} (only 'float')")
    block = _block(config.get("weight_block_size"), "weight_block_size")
    return Fp8Layout(TRANSFORMERS_FP8, "weight_scale_inv", block, per_channel=False)


def _compressed_tensors_layout(config: dict[str, Any]) -> Fp8Layout:
    if config.get("format") != "float-quantized":
        raise _unsupported(
            f"compressed-tensors format {config.get('format')!r} (only 'float-quantized')"
        )
    kv_scheme = config.get("kv_cache_scheme")
    if kv_scheme is not None:
        _check_kv_cache_scheme(kv_scheme)
    groups = config.get("config_groups") or {}
    if not isinstance(groups, dict) or (not groups and kv_scheme is None):
        raise _unsupported("compressed-tensors config without config_groups")
    if not groups:  # the KV cache's scales only: no FP8 weight to find
        return Fp8Layout(COMPRESSED_TENSORS, "weight_scale", None, per_channel=False)
    schemes = set()
    for name, group in groups.items():
        weights = group.get("weights") or {}
        if weights.get("type") != "float" or weights.get("num_bits") != 8:
            raise _unsupported(f"config_groups.{name}.weights: only 8-bit float weights")
        if not weights.get("symmetric", True) or weights.get("dynamic", False):
            raise _unsupported(f"config_groups.{name}.weights: only symmetric, static weights")
        strategy = weights.get("strategy")
        if strategy not in ("channel", "tensor", "block"):
            raise _unsupported(
                f"config_groups.{name}.weights.strategy {strategy!r} (channel, tensor or block)"
            )
        block = _block(
            weights.get("block_structure"), f"config_groups.{name}.weights.block_structure"
        )
        if strategy == "block" and block is None:
            raise _unsupported(f"config_groups.{name}: strategy 'block' without block_structure")
        inputs = group.get("input_activations")
        if inputs is not None and not inputs.get("dynamic", False):
            raise _unsupported(
                f"config_groups.{name}.input_activations: static activation scales (activations "
                "are quantized per token at run time)"
            )
        schemes.add((strategy, block if strategy == "block" else None))
    if len(schemes) != 1:
        raise _unsupported(
            f"config_groups with different weight strategies {sorted(map(str, schemes))}"
        )
    strategy, block = schemes.pop()
    return Fp8Layout(COMPRESSED_TENSORS, "weight_scale", block, per_channel=strategy == "channel")


def _check_kv_cache_scheme(scheme: Any) -> None:
    """What the FP8 KV cache can serve: static e4m3 scales per tensor or per KV head."""
    if not isinstance(scheme, dict):
        raise _unsupported("kv_cache_scheme must be an object")
    if scheme.get("type") != "float" or scheme.get("num_bits") != 8:
        raise _unsupported("kv_cache_scheme: only 8-bit float (the FP8 KV cache is e4m3)")
    if not scheme.get("symmetric", True) or scheme.get("dynamic", False):
        raise _unsupported("kv_cache_scheme: only symmetric, static scales")
    strategy = scheme.get("strategy", "tensor")
    if strategy not in ("tensor", "attn_head"):
        raise _unsupported(
            f"kv_cache_scheme.strategy {strategy!r} (one scale per tensor or per attention head)"
        )


def split_fp8_state(
    state: dict[str, torch.Tensor],  # as read: FP8 weights, their scales, the rest
    layout: Fp8Layout,
    dtype: torch.dtype,
    keep_fp8: bool,
) -> tuple[dict[str, torch.Tensor], dict[str, Fp8Weight]]:
    """(the state dict in `dtype`, every FP8 weight dequantized; with `keep_fp8` the FP8 weights
    per channel by module name, e.g. ``model.layers.0.mlp.down_proj``)."""
    scales = {n for n in state if n.endswith("." + layout.scale_suffix)}
    plain: dict[str, torch.Tensor] = {}
    quantized: dict[str, Fp8Weight] = {}
    used: set[str] = set()
    for name, tensor in state.items():
        if name in scales:
            continue
        if name.endswith((".input_scale", ".weight_zero_point", ".activation_scale")):
            raise _unsupported(f"tensor {name!r} (static activation scales or zero points)")
        if tensor.dtype != FP8_DTYPE:
            plain[name] = tensor.to(dtype) if tensor.is_floating_point() else tensor
            continue
        if not name.endswith(".weight") or tensor.dim() != 2:
            raise _unsupported(f"FP8 tensor {name!r} is not a linear layer's 2-d weight")
        module = name.removesuffix(".weight")
        scale_name = f"{module}.{layout.scale_suffix}"
        if scale_name not in state:
            raise CheckpointError(f"FP8 weight {name!r} has no scale {scale_name!r}")
        used.add(scale_name)
        dequantized, fp8 = _decode(name, tensor, state[scale_name].float(), layout)
        plain[name] = dequantized.to(dtype)
        if keep_fp8:
            quantized[module] = fp8 if fp8 is not None else quantize_weight(dequantized)
    orphans = sorted(scales - used)
    if orphans:
        raise CheckpointError(f"scales without an FP8 weight: {orphans[:8]}")
    return plain, quantized


def _decode(
    name: str,
    weight: torch.Tensor,  # [out, in] float8_e4m3fn
    scale: torch.Tensor,  # fp32, the layout's shape
    layout: Fp8Layout,
) -> tuple[torch.Tensor, Fp8Weight | None]:
    """(the weight dequantized [out, in] fp32, its per-channel FP8 form when the checkpoint's
    scales are per channel or per tensor; None for blocks: requantized by the caller)."""
    out_features, in_features = weight.shape
    if scale.numel() == 1 and layout.block is None and not layout.per_channel:
        channel = scale.reshape(1).expand(out_features).contiguous()
    elif layout.per_channel and scale.shape in ((out_features, 1), (out_features,)):
        channel = scale.reshape(out_features)
    elif layout.block is not None:
        return _dequantize_blocks(name, weight, scale, layout.block), None
    else:
        raise CheckpointError(
            f"{name}: scale of shape {tuple(scale.shape)} does not fit {layout.method}'s layout "
            f"for a {out_features}x{in_features} weight"
        )
    dequantized = weight.float() * channel[:, None]
    return dequantized, weight_from_rows(weight, channel, in_features)


def _dequantize_blocks(
    name: str, weight: torch.Tensor, scale: torch.Tensor, block: tuple[int, int]
) -> torch.Tensor:  # [out, in] fp32
    out_features, in_features = weight.shape
    bn, bk = block
    expected = (-(-out_features // bn), -(-in_features // bk))
    if tuple(scale.shape) != expected:
        raise CheckpointError(
            f"{name}: block scale of shape {tuple(scale.shape)}, expected {expected} for a "
            f"{out_features}x{in_features} weight in {bn}x{bk} blocks"
        )
    per_element = scale.repeat_interleave(bn, dim=0)[:out_features]
    per_element = per_element.repeat_interleave(bk, dim=1)[:, :in_features]
    return weight.float() * per_element
