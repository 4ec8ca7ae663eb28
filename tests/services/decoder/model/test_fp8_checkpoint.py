"""Checkpoints already in FP8: transformers' fine-grained layout (`weight_scale_inv` per
128x128 block as in Qwen3-*-FP8, other block sizes, one scale per tensor) and compressed-tensors'
per-channel `weight_scale` [out, 1]. Per-channel and per-tensor weights are served as stored;
block weights dequantized and quantized again per channel; with `quantization="none"` every
weight is dequantized to the model dtype. Unsupported layouts are refused by name."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.services.decoder.model.fp8_checkpoints import (
    compressed_tensors_config,
    set_quantization_config,
    transformers_config,
    write_fp8_checkpoint,
)
from widebeam.services.decoder.model.attention_context import DenseCausalAttention
from widebeam.services.decoder.model.fp8_checkpoint import read_fp8_layout
from widebeam.services.decoder.model.transformer import CausalLM
from widebeam.services.decoder.model.weights import CheckpointError

TinyFactory = Callable[..., Path]
LAYOUTS = [
    ("transformers", (128, 128)),  # Qwen3-*-FP8's blocks: one block per tiny weight
    ("transformers", (48, 32)),  # several blocks, partial ones at the edges
    ("transformers", None),  # one scale per tensor
    ("compressed-tensors:channel", None),
    ("compressed-tensors:tensor", None),
    ("compressed-tensors:block", (32, 48)),
]


def _relative(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.float() - want.float()).norm() / want.float().norm())


def _hidden(model: CausalLM, n: int = 17) -> torch.Tensor:
    generator = torch.Generator().manual_seed(n)
    ids = torch.randint(0, model.config.vocab_size, (n,), generator=generator)
    with torch.inference_mode():
        return model(ids, torch.arange(n), DenseCausalAttention())


@pytest.fixture(scope="module")
def source(tiny_model_dir: TinyFactory) -> Path:
    return tiny_model_dir(num_layers=2, dtype="bfloat16")


def _checkpoint(source: Path, tmp_path: Path, layout: str, block: Any) -> Path:
    return write_fp8_checkpoint(source, tmp_path / "fp8", layout, block)


@pytest.mark.parametrize(("layout", "block"), LAYOUTS)
def test_fp8_checkpoint_loads_dequantized_without_quantization(
    source: Path, tmp_path: Path, layout: str, block: Any
) -> None:
    ckpt = _checkpoint(source, tmp_path, layout, block)
    stored = load_file(str(ckpt / "model.safetensors"))
    model = CausalLM.from_pretrained(ckpt, dtype=torch.float32)
    name = "model.layers.1.mlp.down_proj.weight"
    scale = stored[name + ("_scale" if layout.startswith("compressed") else "_scale_inv")]
    weight = stored[name].float()
    if block is not None:
        scale = scale.repeat_interleave(block[0], 0)[: weight.shape[0]]
        scale = scale.repeat_interleave(block[1], 1)[:, : weight.shape[1]]
    assert torch.equal(model.model.layers[1].mlp.down_proj.weight, weight * scale)
    # close to the bf16 model it was quantized from (weights only: ~2.5% per GEMM)
    plain = CausalLM.from_pretrained(source, dtype=torch.float32)
    assert _relative(_hidden(model), _hidden(plain)) < 0.1


@pytest.mark.parametrize(("layout", "block"), LAYOUTS)
def test_fp8_checkpoint_served_in_fp8(
    source: Path, tmp_path: Path, layout: str, block: Any
) -> None:
    ckpt = _checkpoint(source, tmp_path, layout, block)
    stored = load_file(str(ckpt / "model.safetensors"))
    model = CausalLM.from_pretrained(ckpt, dtype=torch.bfloat16, quantization="fp8")
    down = model.model.layers[0].mlp.down_proj
    name = "model.layers.0.mlp.down_proj.weight"
    if block is None:  # per channel or per tensor: the stored FP8 values and scales, as they are
        out_features = stored[name].shape[0]
        assert torch.equal(down.weight[:out_features].float(), stored[name].float())
        scale_key = name + ("_scale" if layout.startswith("compressed") else "_scale_inv")
        want = stored[scale_key].float().reshape(-1).expand(out_features)
        assert torch.equal(down.weight_scale[0, :out_features], want)
    # against the same checkpoint served dequantized in bf16: activations' quantization only
    # (and, for blocks, the per-channel requantization)
    dequantized = CausalLM.from_pretrained(ckpt, dtype=torch.bfloat16)
    error = _relative(_hidden(model), _hidden(dequantized))
    assert 0.005 < error < 0.2, error


def _refused(model_dir: Path, match: str) -> None:
    with pytest.raises(CheckpointError, match=match):
        CausalLM.from_pretrained(model_dir, dtype=torch.bfloat16, quantization="fp8")


def test_unknown_quant_method_is_refused(source: Path, tmp_path: Path) -> None:
    ckpt = _checkpoint(source, tmp_path, "compressed-tensors:channel", None)
    set_quantization_config(ckpt, {"quant_method": "gptq", "bits": 4})
    _refused(ckpt, "quant_method 'gptq' is not supported")


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"activation_scheme": "static"}, "activation_scheme 'static'"),
        ({"fmt": "e5m2"}, "fmt 'e5m2'"),
        ({"scale_fmt": "ue8m0"}, "scale_fmt 'ue8m0'"),
        ({"weight_block_size": [128]}, "weight_block_size must be two positive integers"),
    ],
)
def test_unsupported_transformers_layouts_are_refused(
    source: Path, tmp_path: Path, change: dict[str, Any], match: str
) -> None:
    ckpt = _checkpoint(source, tmp_path, "transformers", (128, 128))
    set_quantization_config(ckpt, transformers_config((128, 128)) | change)
    _refused(ckpt, match)


def _compressed(**weights: Any) -> dict[str, Any]:
    config = compressed_tensors_config()
    config["config_groups"]["group_0"]["weights"].update(weights)
    return config


@pytest.mark.parametrize(
    ("config", "match"),
    [
        (_compressed(strategy="group", group_size=128), "strategy 'group'"),
        (_compressed(type="int"), "only 8-bit float weights"),
        (_compressed(symmetric=False), "only symmetric, static weights"),
        (compressed_tensors_config() | {"format": "pack-quantized"}, "format 'pack-quantized'"),
        (  # the FP8 KV cache takes static e4m3 scales only (test_kv_scales.py)
            compressed_tensors_config() | {"kv_cache_scheme": {"num_bits": 8, "type": "int"}},
            "kv_cache_scheme: only 8-bit float",
        ),
    ],
)
def test_unsupported_compressed_tensors_layouts_are_refused(
    source: Path, tmp_path: Path, config: dict[str, Any], match: str
) -> None:
    ckpt = _checkpoint(source, tmp_path, "compressed-tensors:channel", None)
    set_quantization_config(ckpt, config)
    _refused(ckpt, match)


def test_static_activation_scales_are_refused(source: Path, tmp_path: Path) -> None:
    ckpt = _checkpoint(source, tmp_path, "compressed-tensors:channel", None)
    config = compressed_tensors_config()
    config["config_groups"]["group_0"]["input_activations"]["dynamic"] = False
    set_quantization_config(ckpt, config)
    _refused(ckpt, "static activation scales")


def test_a_weight_without_its_scale_is_refused(source: Path, tmp_path: Path) -> None:
    ckpt = _checkpoint(source, tmp_path, "compressed-tensors:channel", None)
    state = load_file(str(ckpt / "model.safetensors"))
    del state["model.layers.0.self_attn.q_proj.weight_scale"]
    save_file(state, str(ckpt / "model.safetensors"))
    _refused(ckpt, "'model.layers.0.self_attn.q_proj.weight' has no scale")


def test_a_scale_of_the_wrong_shape_is_refused(source: Path, tmp_path: Path) -> None:
    ckpt = _checkpoint(source, tmp_path, "transformers", (32, 32))
    set_quantization_config(ckpt, transformers_config((64, 64)))
    _refused(ckpt, r"block scale of shape \(2, \d\), expected \(1, \d\) .* in 64x64 blocks")


def test_plain_checkpoints_have_no_fp8_layout(source: Path) -> None:
    assert read_fp8_layout(source) is None
