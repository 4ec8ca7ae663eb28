from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from widebeam.services.decoder.model.config import (
    ConfigError,
    GenerationDefaults,
    ModelConfig,
    RopeScaling,
)

TinyFactory = Callable[..., Path]

BASE: dict[str, Any] = {
    "model_type": "qwen3",
    "vocab_size": 100,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
}


def _cfg(**overrides: Any) -> ModelConfig:
    raw = {**BASE, **overrides}
    return ModelConfig.from_dict({k: v for k, v in raw.items() if v is not None})


def _write(path: Path, name: str, data: dict[str, Any]) -> None:
    (path / name).write_text(json.dumps(data))


@pytest.mark.parametrize("model_type", ["qwen3", "qwen2", "llama"])
def test_tiny_dir_round_trip(tiny_model_dir: TinyFactory, model_type: str) -> None:
    cfg = ModelConfig.from_pretrained(tiny_model_dir(model_type=model_type))
    assert cfg.model_type == model_type
    assert (cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads) == (64, 4, 2)
    assert cfg.head_dim == 16 and cfg.rope_theta == 10000.0 and cfg.rope_scaling is None
    assert cfg.qk_norm == (model_type == "qwen3")
    assert cfg.attention_bias == (model_type == "qwen2")
    assert not cfg.o_proj_bias
    assert cfg.tie_word_embeddings and cfg.torch_dtype == "float32"


def test_head_dim_defaults_to_hidden_over_heads() -> None:
    assert _cfg().head_dim == 16
    assert _cfg(head_dim=32).head_dim == 32


def test_qwen2_always_has_qkv_bias_and_llama_bias_covers_o_proj() -> None:
    qwen2 = _cfg(model_type="qwen2", attention_bias=None)
    assert qwen2.attention_bias and not qwen2.o_proj_bias
    llama = _cfg(model_type="llama", attention_bias=True, mlp_bias=True)
    assert llama.attention_bias and llama.o_proj_bias and llama.mlp_bias


def test_reads_configs_saved_by_transformers(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    llama3 = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 1024,
    }
    cases = {
        "qwen3": transformers.Qwen3Config(rope_theta=1e6, **_small_hf()),
        "qwen2": transformers.Qwen2Config(rope_theta=5e5, **_small_hf()),
        "llama": transformers.LlamaConfig(rope_scaling=llama3, rope_theta=5e5, **_small_hf()),
    }
    for name, hf_cfg in cases.items():
        hf_cfg.save_pretrained(tmp_path / name)
        cfg = ModelConfig.from_pretrained(tmp_path / name)
        assert cfg.model_type == name and cfg.head_dim == 16
        assert cfg.rope_theta == (1e6 if name == "qwen3" else 5e5)
    assert ModelConfig.from_pretrained(tmp_path / "llama").rope_scaling == RopeScaling(
        "llama3", 8.0, 1.0, 4.0, 1024
    )
    assert ModelConfig.from_pretrained(tmp_path / "qwen2").attention_bias


def _small_hf() -> dict[str, Any]:
    return {
        "vocab_size": 100,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 1,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "max_position_embeddings": 4096,
    }


def test_rope_old_and_new_spellings_agree() -> None:
    new = _cfg(rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 5e5})
    old = _cfg(rope_theta=5e5, rope_scaling={"type": "linear", "factor": 2.0})
    assert new.rope_theta == old.rope_theta == 5e5
    assert new.rope_scaling == old.rope_scaling == RopeScaling("linear", 2.0)
    assert _cfg(rope_theta=123.0, rope_scaling=None).rope_theta == 123.0
    assert _cfg().rope_theta == 10000.0


def test_llama3_original_max_defaults_to_max_positions() -> None:
    cfg = _cfg(
        max_position_embeddings=8192,
        rope_scaling={
            "rope_type": "llama3",
            "factor": 8,
            "low_freq_factor": 1,
            "high_freq_factor": 4,
        },
    )
    assert cfg.rope_scaling is not None
    assert cfg.rope_scaling.original_max_position_embeddings == 8192
    assert cfg.rope_type == "llama3"


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "unsupported rope scaling.*yarn"),
        ({"rope_parameters": {"rope_type": "dynamic", "factor": 2.0}}, "dynamic"),
        ({"rope_scaling": {"rope_type": "linear"}}, "factor"),
        ({"model_type": "mistral"}, "unsupported model_type 'mistral'"),
        ({"model_type": None}, "unsupported model_type None"),
        ({"hidden_act": "gelu"}, "hidden_act"),
        ({"use_sliding_window": True}, "sliding"),
        ({"partial_rotary_factor": 0.5}, "partial_rotary_factor"),
        ({"vocab_size": None}, "vocab_size"),
        ({"num_key_value_heads": 3}, "divisible"),
    ],
)
def test_unsupported_configs_fail_clearly(overrides: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        _cfg(**overrides)


def test_error_names_the_file(tmp_path: Path) -> None:
    _write(tmp_path, "config.json", {**BASE, "model_type": "gpt2"})
    with pytest.raises(ValueError, match=r"config\.json: unsupported model_type 'gpt2'"):
        ModelConfig.from_pretrained(tmp_path)
    with pytest.raises(FileNotFoundError):
        ModelConfig.from_pretrained(tmp_path / "nowhere")


def test_config_is_frozen() -> None:
    cfg = _cfg()
    with pytest.raises(AttributeError):
        cfg.vocab_size = 5  # type: ignore[misc]


@pytest.mark.parametrize(
    ("gen_eos", "cfg_eos", "expected"),
    [
        (7, 1, (7,)),
        ([7, 8, 7], 1, (7, 8)),
        (None, [3, 4], (3, 4)),
        (None, None, ()),
    ],
)
def test_generation_defaults_eos(
    tmp_path: Path, gen_eos: Any, cfg_eos: Any, expected: tuple[int, ...]
) -> None:
    _write(tmp_path, "config.json", {**BASE, "eos_token_id": cfg_eos, "bos_token_id": 2})
    _write(tmp_path, "generation_config.json", {"eos_token_id": gen_eos, "pad_token_id": 0})
    gen = GenerationDefaults.from_pretrained(tmp_path)
    assert gen.eos_token_ids == expected
    assert (gen.bos_token_id, gen.pad_token_id) == (2, 0)


def test_generation_defaults_without_generation_config(tmp_path: Path) -> None:
    _write(tmp_path, "config.json", {**BASE, "eos_token_id": 9})
    gen = GenerationDefaults.from_pretrained(tmp_path)
    assert gen == GenerationDefaults(eos_token_ids=(9,), bos_token_id=None, pad_token_id=None)


def test_tiny_generation_defaults(tiny_model_dir: TinyFactory) -> None:
    gen = GenerationDefaults.from_pretrained(tiny_model_dir())
    # base_vocab 64: <|endoftext|>=64, <|im_start|>=65, <|im_end|>=66
    assert gen.eos_token_ids == (66, 64) and gen.pad_token_id == 64
