"""The FP8 KV cache's static scales (`model/kv_scales.py`): the weight bound holds for every
input (no K or V value of a forward exceeds 448 x its head's scale: Qwen3's q/k norm, Qwen2's
biases, Llama), and a checkpoint's `k_scale` / `v_scale` / `kv_scale` (per tensor or per KV head,
compressed-tensors' or ModelOpt's names) replace it layer by layer."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.services.decoder.model.fp8_checkpoints import (
    compressed_tensors_config,
    set_quantization_config,
)
from widebeam.kernels.fp8.quantize import FP8_MAX
from widebeam.services.decoder.model.attention_context import DenseCausalAttention
from widebeam.services.decoder.model.transformer import CausalLM
from widebeam.services.decoder.model.weights import CheckpointError

TinyFactory = Callable[..., Path]
HEADS = 2  # the tiny models' KV heads


class _Recording(DenseCausalAttention):
    """Dense attention that keeps every layer's K and V (after rope) of the last forward."""

    def __init__(self) -> None:
        self.kv: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def attend(
        self, layer_idx: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> torch.Tensor:
        self.kv[layer_idx] = (k.float(), v.float())
        return super().attend(layer_idx, q, k, v)


@pytest.mark.parametrize("model_type", ["qwen3", "qwen2", "llama"])
def test_no_value_exceeds_the_weight_bound(tiny_model_dir: TinyFactory, model_type: str) -> None:
    model = CausalLM.from_pretrained(tiny_model_dir(model_type=model_type, seed=3))
    scales = model.kv_scales
    assert scales is not None and scales.k.shape == (model.config.num_hidden_layers, HEADS)
    gen = torch.Generator().manual_seed(0)
    recording = _Recording()
    largest = torch.zeros(2, *scales.k.shape)  # [K/V, layers, heads] of max |value| / bound
    for n in (5, 40):
        ids = torch.randint(0, model.config.vocab_size, (n,), generator=gen)
        with torch.inference_mode():
            model(ids, torch.arange(n), recording)
        for layer, (k, v) in recording.kv.items():
            for i, (x, s) in enumerate(((k, scales.k[layer]), (v, scales.v[layer]))):
                ratio = x.abs().amax(dim=(0, 2)) / (FP8_MAX * s)
                largest[i, layer] = torch.maximum(largest[i, layer], ratio)
    assert (largest <= 1).all(), largest
    assert (largest > 0.05).all(), largest  # a bound, not an absurd one


def _with_tensors(source: Path, out: Path, extra: dict[str, torch.Tensor]) -> Path:
    shutil.copytree(source, out)
    state = load_file(str(out / "model.safetensors"))
    save_file(state | extra, str(out / "model.safetensors"))
    return out


@pytest.fixture(scope="module")
def source(tiny_model_dir: TinyFactory) -> Path:
    return tiny_model_dir(num_layers=3, seed=5)


def _attn(layer: int, name: str) -> str:
    return f"model.layers.{layer}.self_attn.{name}"


def test_checkpoint_scales_replace_the_bound_per_layer(source: Path, tmp_path: Path) -> None:
    bound = CausalLM.from_pretrained(source).kv_scales
    assert bound is not None
    ckpt = _with_tensors(
        source,
        tmp_path / "scaled",
        {
            _attn(0, "k_scale"): torch.tensor(0.5),  # per tensor
            _attn(0, "v_scale"): torch.tensor([0.1, 0.2]),  # per KV head
            _attn(0, "q_scale"): torch.tensor(3.0),  # queries stay unquantized: dropped
            _attn(1, "kv_scale"): torch.tensor([0.25]),  # the older name: K and V alike
            _attn(2, "k_proj.k_scale"): torch.tensor(0.125),  # ModelOpt's
        },
    )
    # compressed-tensors' KV cache scales alone, no quantized weight
    kv_scheme = {"num_bits": 8, "type": "float", "strategy": "attn_head", "dynamic": False}
    config = compressed_tensors_config() | {"config_groups": {}, "kv_cache_scheme": kv_scheme}
    set_quantization_config(ckpt, config)
    scales = CausalLM.from_pretrained(ckpt).kv_scales
    assert scales is not None
    assert scales.k.tolist() == [[0.5, 0.5], [0.25, 0.25], [0.125, 0.125]]
    assert scales.v[0].tolist() == pytest.approx([0.1, 0.2])
    assert scales.v[1].tolist() == [0.25, 0.25]
    assert torch.equal(scales.v[2], bound.v[2])  # no V scale for layer 2: the weight bound
    assert torch.equal(scales.k_inv, 1.0 / scales.k)


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        ({_attn(0, "k_scale"): torch.ones(3)}, r"expected one scale or one per KV head \(2\)"),
        ({_attn(0, "v_scale"): torch.tensor(-1.0)}, "positive and finite"),
        (
            {_attn(0, "k_scale"): torch.tensor(1.0), _attn(0, "kv_scale"): torch.tensor(1.0)},
            "twice",
        ),
        ({_attn(7, "k_scale"): torch.tensor(1.0)}, "the model has 3 layers"),
        ({_attn(0, "k_proj.v_scale"): torch.tensor(1.0)}, "unexpected KV scale tensor"),
    ],
)
def test_bad_checkpoint_scales_are_refused(
    source: Path, tmp_path: Path, extra: dict[str, torch.Tensor], match: str
) -> None:
    ckpt = _with_tensors(source, tmp_path / "bad", extra)
    with pytest.raises(CheckpointError, match=match):
        CausalLM.from_pretrained(ckpt)


@pytest.mark.parametrize(
    ("scheme", "match"),
    [
        ({"num_bits": 8, "type": "int"}, "only 8-bit float"),
        ({"num_bits": 8, "type": "float", "dynamic": True}, "only symmetric, static scales"),
        ({"num_bits": 8, "type": "float", "strategy": "channel"}, "strategy 'channel'"),
    ],
)
def test_unservable_kv_cache_schemes_are_refused(
    source: Path, tmp_path: Path, scheme: dict[str, object], match: str
) -> None:
    ckpt = _with_tensors(source, tmp_path / "scheme", {})
    set_quantization_config(ckpt, compressed_tensors_config() | {"kv_cache_scheme": scheme})
    with pytest.raises(CheckpointError, match=match):
        CausalLM.from_pretrained(ckpt)
