"""Tiny FP8 checkpoints in the layouts of the HF ecosystem, written from a tiny model directory
for the loading tests: transformers' fine-grained FP8 (`weight_scale_inv` per block, or one per
tensor) and compressed-tensors' per-channel FP8 (`weight_scale` [out, 1])."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

FP8 = torch.float8_e4m3fn
LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def is_layer_linear(name: str) -> bool:
    return name.startswith("model.layers.") and name.endswith(tuple(f"{n}.weight" for n in LINEARS))


def _blocks(weight: torch.Tensor, block: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """(FP8 weight, fp32 scale per block [ceil(out / bn), ceil(in / bk)]), scale = amax / 448."""
    bn, bk = block
    out_features, in_features = weight.shape
    rows, cols = -(-out_features // bn), -(-in_features // bk)
    scale = torch.empty(rows, cols)
    for i in range(rows):
        for j in range(cols):
            tile = weight[i * bn : (i + 1) * bn, j * bk : (j + 1) * bk]
            scale[i, j] = tile.abs().amax().clamp(min=1e-12) / 448.0
    full = scale.repeat_interleave(bn, 0)[:out_features].repeat_interleave(bk, 1)[:, :in_features]
    return (weight / full).clamp(-448, 448).to(FP8), scale


def transformers_config(block: tuple[int, int] | None) -> dict[str, Any]:
    return {
        "quant_method": "fp8",
        "activation_scheme": "dynamic",
        "fmt": "e4m3",
        "weight_block_size": None if block is None else list(block),
        "modules_to_not_convert": ["lm_head"],
    }


def compressed_tensors_config(
    strategy: str = "channel", block: tuple[int, int] | None = None
) -> dict[str, Any]:
    weights: dict[str, Any] = {
        "num_bits": 8,
        "type": "float",
        "strategy": strategy,
        "symmetric": True,
        "dynamic": False,
    }
    if block is not None:
        weights["block_structure"] = list(block)
    return {
        "quant_method": "compressed-tensors",
        "format": "float-quantized",
        "quantization_status": "compressed",
        "ignore": ["lm_head"],
        "kv_cache_scheme": None,
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "weights": weights,
                "input_activations": {
                    "num_bits": 8,
                    "type": "float",
                    "strategy": "token",
                    "symmetric": True,
                    "dynamic": True,
                },
            }
        },
    }


def write_fp8_checkpoint(
    source: Path,
    out: Path,
    layout: str,  # "transformers", or "compressed-tensors" with its strategy after a colon
    block: tuple[int, int] | None = None,  # None: one scale per tensor (or per channel)
) -> Path:
    """`source`'s model with every decoder-layer linear weight in FP8, `layout`'s way:
    "transformers" (`weight_scale_inv` per block, or per tensor without a block) or
    "compressed-tensors:channel" / ":tensor" / ":block" (`weight_scale`)."""
    layout, _, strategy = layout.partition(":")
    shutil.copytree(source, out)
    (out / "model.safetensors").unlink()
    state = load_file(str(source / "model.safetensors"))
    written: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        if not is_layer_linear(name):
            written[name] = tensor
            continue
        weight = tensor.float()
        if layout == "transformers":
            shape = block or tuple(weight.shape)
            data, scale = _blocks(weight, shape)
            written[name] = data
            written[name + "_scale_inv"] = scale if block else scale.reshape(())
        elif strategy == "channel":
            scale = weight.abs().amax(1, keepdim=True).clamp(min=1e-12) / 448.0  # [out, 1]
            written[name] = (weight / scale).clamp(-448, 448).to(FP8)
            written[name + "_scale"] = scale
        else:
            data, scale = _blocks(weight, block if strategy == "block" else tuple(weight.shape))
            written[name] = data
            written[name + "_scale"] = scale if strategy == "block" else scale.reshape(1)
    save_file(written, str(out / "model.safetensors"))
    config = json.loads((source / "config.json").read_text())
    if layout == "transformers":
        config["quantization_config"] = transformers_config(block)
    else:
        config["quantization_config"] = compressed_tensors_config(strategy, block)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    return out


def set_quantization_config(model_dir: Path, quantization_config: dict[str, Any]) -> None:
    config = json.loads((model_dir / "config.json").read_text())
    config["quantization_config"] = quantization_config
    (model_dir / "config.json").write_text(json.dumps(config, indent=2))
