"""Model and generation settings parsed from a Hugging Face model directory.

Only the fields our own forward needs are kept; anything that would change the maths but that we
do not implement (other rope types, sliding windows, partial rotary, non-SiLU MLPs) is rejected
up front so a model never silently produces wrong logits.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SUPPORTED_MODEL_TYPES: tuple[str, ...] = ("qwen3", "qwen2", "llama")
SUPPORTED_ROPE_TYPES: tuple[str, ...] = ("default", "linear", "llama3")
# HF's base default when a config names no theta at all (llama/qwen2/qwen3 config classes).
_DEFAULT_ROPE_THETA = 10000.0


class ConfigError(ValueError):
    """A config.json that we cannot (or must not) run."""


@dataclass(frozen=True)
class RopeScaling:
    """Frequency scaling applied on top of the default rope inverse frequencies."""

    rope_type: str  # "linear" or "llama3"
    factor: float
    # llama3 only:
    low_freq_factor: float | None = None
    high_freq_factor: float | None = None
    original_max_position_embeddings: int | None = None


@dataclass(frozen=True)
class ModelConfig:
    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: RopeScaling | None  # None means plain ("default") rope
    max_position_embeddings: int
    tie_word_embeddings: bool
    attention_bias: bool  # bias on q/k/v projections
    o_proj_bias: bool  # llama/qwen3 put attention_bias on o_proj too; qwen2 never does
    mlp_bias: bool
    qk_norm: bool  # per-head RMSNorm on q and k before rope (qwen3)
    torch_dtype: str | None  # checkpoint dtype as written ("bfloat16", ...), informational

    @property
    def rope_type(self) -> str:
        return "default" if self.rope_scaling is None else self.rope_scaling.rope_type

    @classmethod
    def from_pretrained(cls, path: str | Path) -> ModelConfig:
        """Read ``config.json`` from a model directory (or the file itself)."""
        file = Path(path)
        if file.is_dir():
            file = file / "config.json"
        if not file.is_file():
            raise FileNotFoundError(f"no config.json at {file}")
        with file.open() as fh:
            raw = json.load(fh)
        try:
            return cls.from_dict(raw)
        except ConfigError as exc:
            raise ConfigError(f"{file}: {exc}") from None

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> ModelConfig:
        model_type = raw.get("model_type")
        if model_type not in SUPPORTED_MODEL_TYPES:
            supported = ", ".join(SUPPORTED_MODEL_TYPES)
            raise ConfigError(f"unsupported model_type {model_type!r}; supported: {supported}")
        _reject_unsupported_features(raw)
        hidden = int(_require(raw, "hidden_size"))
        n_heads = int(_require(raw, "num_attention_heads"))
        n_kv = int(raw.get("num_key_value_heads") or n_heads)
        if n_heads % n_kv != 0:
            raise ConfigError(f"num_attention_heads={n_heads} not divisible by {n_kv} kv heads")
        head_dim = int(raw.get("head_dim") or hidden // n_heads)
        max_pos = int(raw.get("max_position_embeddings") or 2048)
        rope_theta, rope_scaling = _parse_rope(raw, max_pos)
        bias = bool(raw.get("attention_bias") or False)
        if model_type == "qwen2":
            # Qwen2's modeling code hard-codes q/k/v bias (the config key is not consulted).
            qkv_bias, o_bias = True, False
        else:
            qkv_bias, o_bias = bias, bias
        return cls(
            model_type=model_type,
            vocab_size=int(_require(raw, "vocab_size")),
            hidden_size=hidden,
            intermediate_size=int(_require(raw, "intermediate_size")),
            num_hidden_layers=int(_require(raw, "num_hidden_layers")),
            num_attention_heads=n_heads,
            num_key_value_heads=n_kv,
            head_dim=head_dim,
            rms_norm_eps=float(raw.get("rms_norm_eps") or 1e-6),
            rope_theta=rope_theta,
            rope_scaling=rope_scaling,
            max_position_embeddings=max_pos,
            tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
            attention_bias=qkv_bias,
            o_proj_bias=o_bias,
            mlp_bias=bool(raw.get("mlp_bias") or False) if model_type == "llama" else False,
            qk_norm=model_type == "qwen3",
            torch_dtype=raw.get("dtype") or raw.get("torch_dtype"),
        )


def _require(raw: dict[str, Any], key: str) -> Any:
    if raw.get(key) is None:
        raise ConfigError(f"config.json lacks required key {key!r}")
    return raw[key]


def _reject_unsupported_features(raw: dict[str, Any]) -> None:
    act = raw.get("hidden_act", "silu")
    if act != "silu":
        raise ConfigError(f"unsupported hidden_act {act!r}; only 'silu' (SwiGLU) is implemented")
    if raw.get("use_sliding_window"):
        raise ConfigError("sliding-window attention is not supported")
    layer_types = raw.get("layer_types") or []
    if any(t != "full_attention" for t in layer_types):
        kinds = sorted(set(layer_types))
        raise ConfigError(f"only full_attention layers are supported, got {kinds}")


def _parse_rope(raw: dict[str, Any], max_pos: int) -> tuple[float, RopeScaling | None]:
    """Accept both spellings: transformers 5 writes ``rope_parameters`` (theta inside), older
    versions write top-level ``rope_theta`` plus an optional ``rope_scaling`` dict."""
    params = raw.get("rope_scaling") or raw.get("rope_parameters") or {}
    if not isinstance(params, dict):
        raise ConfigError(f"rope parameters must be a dict, got {params!r}")
    if params and all(isinstance(v, dict) for v in params.values()):
        raise ConfigError("per-layer-type rope parameters are not supported")
    theta = params.get("rope_theta") or raw.get("rope_theta") or _DEFAULT_ROPE_THETA
    partial = params.get("partial_rotary_factor", raw.get("partial_rotary_factor", 1.0))
    if partial is not None and float(partial) != 1.0:
        raise ConfigError(f"partial_rotary_factor={partial} is not supported")
    rope_type = params.get("rope_type") or params.get("type") or "default"
    if rope_type not in SUPPORTED_ROPE_TYPES:
        raise ConfigError(
            f"unsupported rope scaling type {rope_type!r}; supported: "
            f"{', '.join(SUPPORTED_ROPE_TYPES)}"
        )
    if rope_type == "default":
        return float(theta), None
    factor = params.get("factor")
    if factor is None:
        raise ConfigError(f"rope_type {rope_type!r} needs a 'factor'")
    if rope_type == "linear":
        return float(theta), RopeScaling(rope_type="linear", factor=float(factor))
    missing = [k for k in ("low_freq_factor", "high_freq_factor") if params.get(k) is None]
    if missing:
        raise ConfigError(f"rope_type 'llama3' lacks {missing}")
    orig = raw.get("original_max_position_embeddings") or params.get(
        "original_max_position_embeddings", max_pos
    )
    return float(theta), RopeScaling(
        rope_type="llama3",
        factor=float(factor),
        low_freq_factor=float(params["low_freq_factor"]),
        high_freq_factor=float(params["high_freq_factor"]),
        original_max_position_embeddings=int(orig),
    )


@dataclass(frozen=True)
class GenerationDefaults:
    """Special token ids used to stop/pad generation."""

    eos_token_ids: tuple[int, ...]
    bos_token_id: int | None
    pad_token_id: int | None

    @classmethod
    def from_pretrained(cls, path: str | Path) -> GenerationDefaults:
        """Prefer ``generation_config.json``; fall back to ``config.json`` key by key, as HF does
        when a generation config omits a value."""
        root = Path(path)
        gen = _read_json(root / "generation_config.json")
        cfg = _read_json(root / "config.json")

        def pick(key: str) -> Any:
            value = gen.get(key)
            return value if value is not None else cfg.get(key)

        return cls(
            eos_token_ids=_as_id_tuple(pick("eos_token_id")),
            bos_token_id=_as_optional_id(pick("bos_token_id")),
            pad_token_id=_as_optional_id(pick("pad_token_id")),
        )


def _read_json(file: Path) -> dict[str, Any]:
    if not file.is_file():
        return {}
    with file.open() as fh:
        data = json.load(fh)
    return data if isinstance(data, dict) else {}


def _as_id_tuple(value: Any) -> tuple[int, ...]:
    if value is None:
        return ()
    if isinstance(value, int):
        return (value,)
    # Deduplicate but keep order: first eos is conventionally the "main" one.
    return tuple(dict.fromkeys(int(v) for v in value))


def _as_optional_id(value: Any) -> int | None:
    if isinstance(value, list):
        value = value[0] if value else None
    return None if value is None else int(value)
