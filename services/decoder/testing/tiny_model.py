"""Tiny random HF-format models for tests and the demo.

Deliberately free of transformers: the serving image does not ship it, yet the demo still needs a
model directory that transformers *could* load (tests use that to check parity).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors.torch import save_file

from widebeam.services.decoder.config import DType
from widebeam.services.decoder.model.config import ModelConfig
from widebeam.services.decoder.model.weights import INDEX_FILE, SINGLE_FILE
from widebeam.services.decoder.testing.tiny_tokenizer import tiny_vocab, write_tokenizer

_ARCHITECTURES = {
    "qwen3": "Qwen3ForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "llama": "LlamaForCausalLM",
}


def write_tiny_model(
    out_dir: str | Path,
    *,
    vocab_size: int | None = None,
    hidden_size: int = 64,
    intermediate_size: int = 128,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    head_dim: int = 16,
    tie_word_embeddings: bool = True,
    model_type: str = "qwen3",
    dtype: str = DType.FLOAT32,
    seed: int = 0,
    init_std: float | None = None,
    shards: int = 1,
    eos_token_id: int | Sequence[int] | None = None,
    sid_levels: tuple[int, ...] | None = None,
    sid_begin_end: bool = True,
    base_vocab: int = 64,
    rope_theta: float = 10000.0,
    max_position_embeddings: int = 4096,
) -> Path:
    """Write a random ``model_type`` ("qwen3", "qwen2", "llama") model directory and return it.

    Files: ``config.json`` (HF keys, both rope spellings), ``generation_config.json``,
    ``model.safetensors`` or ``shards`` files plus ``model.safetensors.index.json``,
    ``tokenizer.json`` and ``tokenizer_config.json``.

    Vocabulary (ids in this order): ``<t_0>..<t_{base_vocab-1}>``, ``<|endoftext|>``,
    ``<|im_start|>``, ``<|im_end|>``; then, if ``sid_levels=(C0, C1, ...)``, the SID tokens
    ``<s_a_0>..<s_a_{C0-1}>``, ``<s_b_0>..`` with consecutive ids per level, then
    ``<|sid_begin|>``, ``<|sid_end|>`` if ``sid_begin_end``. ``vocab_size`` defaults to the
    tokenizer length; a larger value adds embedding rows with no token (as real Qwen checkpoints
    pad their vocab). ``eos_token_id`` defaults to (``<|im_end|>``, ``<|endoftext|>``).

    ``init_std`` None picks a spread-out init (logit std ~3, few near-ties for beam parity);
    a float uses that std for every matrix, HF style.
    """
    if model_type not in _ARCHITECTURES:
        raise ValueError(f"model_type must be one of {sorted(_ARCHITECTURES)}, got {model_type!r}")
    if dtype not in tuple(DType):
        raise ValueError(f"dtype must be one of {', '.join(DType)}, got {dtype!r}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokens = tiny_vocab(base_vocab, sid_levels, sid_begin_end)
    vocab = vocab_size if vocab_size is not None else len(tokens)
    if vocab < len(tokens):
        raise ValueError(f"vocab_size={vocab} is smaller than the {len(tokens)} tokens")
    ids = {t: i for i, t in enumerate(tokens)}
    if eos_token_id is None:
        eos: int | list[int] = [ids["<|im_end|>"], ids["<|endoftext|>"]]
    else:
        eos = eos_token_id if isinstance(eos_token_id, int) else list(eos_token_id)

    config = _config_dict(
        model_type=model_type,
        vocab_size=vocab,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_layers=num_layers,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        head_dim=head_dim,
        tie=tie_word_embeddings,
        dtype=dtype,
        eos=eos,
        bos=ids["<|endoftext|>"],
        rope_theta=rope_theta,
        max_position_embeddings=max_position_embeddings,
    )
    _write_json(out / "config.json", config)
    _write_json(
        out / "generation_config.json",
        {
            "bos_token_id": ids["<|endoftext|>"],
            "eos_token_id": eos,
            "pad_token_id": ids["<|endoftext|>"],
        },
    )
    shapes = _param_shapes(ModelConfig.from_dict(config))
    state = _random_state(shapes, seed=seed, init_std=init_std, hidden_size=hidden_size)
    state = {k: v.to(getattr(torch, dtype)).contiguous() for k, v in state.items()}
    _save_weights(out, state, shards)
    write_tokenizer(out, tokens)
    return out


def _config_dict(
    *,
    model_type: str,
    vocab_size: int,
    hidden_size: int,
    intermediate_size: int,
    num_layers: int,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    tie: bool,
    dtype: str,
    eos: int | list[int],
    bos: int,
    rope_theta: float,
    max_position_embeddings: int,
) -> dict[str, object]:
    return {
        "architectures": [_ARCHITECTURES[model_type]],
        "model_type": model_type,
        "vocab_size": vocab_size,
        "hidden_size": hidden_size,
        "intermediate_size": intermediate_size,
        "num_hidden_layers": num_layers,
        "num_attention_heads": num_heads,
        "num_key_value_heads": num_kv_heads,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": max_position_embeddings,
        "rms_norm_eps": 1e-6,
        # Both spellings: transformers 5 reads rope_parameters, 4.x reads rope_theta.
        "rope_theta": rope_theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": rope_theta},
        "tie_word_embeddings": tie,
        "attention_bias": model_type == "qwen2",
        "attention_dropout": 0.0,
        "use_sliding_window": False,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "dtype": dtype,
        "torch_dtype": dtype,
    }


def _param_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    h, inter, hd = cfg.hidden_size, cfg.intermediate_size, cfg.head_dim
    q_out, kv_out = cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (cfg.vocab_size, h)}
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        shapes[p + "self_attn.q_proj.weight"] = (q_out, h)
        shapes[p + "self_attn.k_proj.weight"] = (kv_out, h)
        shapes[p + "self_attn.v_proj.weight"] = (kv_out, h)
        shapes[p + "self_attn.o_proj.weight"] = (h, q_out)
        if cfg.attention_bias:
            shapes[p + "self_attn.q_proj.bias"] = (q_out,)
            shapes[p + "self_attn.k_proj.bias"] = (kv_out,)
            shapes[p + "self_attn.v_proj.bias"] = (kv_out,)
        if cfg.o_proj_bias:
            shapes[p + "self_attn.o_proj.bias"] = (h,)
        if cfg.qk_norm:
            shapes[p + "self_attn.q_norm.weight"] = (hd,)
            shapes[p + "self_attn.k_norm.weight"] = (hd,)
        shapes[p + "mlp.gate_proj.weight"] = (inter, h)
        shapes[p + "mlp.up_proj.weight"] = (inter, h)
        shapes[p + "mlp.down_proj.weight"] = (h, inter)
        shapes[p + "input_layernorm.weight"] = (h,)
        shapes[p + "post_attention_layernorm.weight"] = (h,)
    shapes["model.norm.weight"] = (h,)
    if not cfg.tie_word_embeddings:
        shapes["lm_head.weight"] = (cfg.vocab_size, h)
    return shapes


def _random_state(
    shapes: dict[str, tuple[int, ...]], *, seed: int, init_std: float | None, hidden_size: int
) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    state: dict[str, torch.Tensor] = {}
    for name, shape in shapes.items():
        noise = torch.randn(shape, generator=gen, dtype=torch.float32)
        if name.endswith("norm.weight"):
            # Not exactly 1 so a forgotten norm weight shows up in parity tests.
            state[name] = 1.0 + 0.1 * noise
        elif name.endswith(".bias"):
            state[name] = 0.1 * noise
        elif init_std is not None:
            state[name] = init_std * noise
        elif name in ("model.embed_tokens.weight", "lm_head.weight"):
            # The final norm output has unit RMS, so logit std ~= std * sqrt(hidden); aim for ~3.
            state[name] = (3.0 / math.sqrt(hidden_size)) * noise
        else:
            # Fan-in scaling keeps every layer contributing without blowing up the residual.
            state[name] = noise / math.sqrt(shape[1])
    return state


def _save_weights(out: Path, state: dict[str, torch.Tensor], shards: int) -> None:
    if shards < 1:
        raise ValueError(f"shards must be >= 1, got {shards}")
    names = list(state)
    if shards == 1:
        save_file(state, str(out / SINGLE_FILE), metadata={"format": "pt"})
        return
    if shards > len(names):
        raise ValueError(f"cannot split {len(names)} tensors into {shards} shards")
    per = math.ceil(len(names) / shards)
    weight_map: dict[str, str] = {}
    for s in range(shards):
        file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: state[n] for n in names[s * per : (s + 1) * per]}
        save_file(part, str(out / file), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(part, file))
    total = sum(t.numel() * t.element_size() for t in state.values())
    _write_json(out / INDEX_FILE, {"metadata": {"total_size": total}, "weight_map": weight_map})


def _write_json(file: Path, data: object) -> None:
    file.write_text(json.dumps(data, indent=2) + "\n")
