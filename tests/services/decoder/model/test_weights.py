from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from widebeam.services.decoder.model.transformer import CausalLM
from widebeam.services.decoder.model.weights import (
    INDEX_FILE,
    SINGLE_FILE,
    CheckpointError,
    checkpoint_files,
    load_state_dict,
)

TinyFactory = Callable[..., Path]


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_sharded_and_single_file_hold_the_same_tensors(tiny_model_dir: TinyFactory) -> None:
    single = tiny_model_dir(tie_word_embeddings=False)
    sharded = tiny_model_dir(tie_word_embeddings=False, shards=3)
    assert len(list(sharded.glob("model-0000?-of-00003.safetensors"))) == 3
    index = json.loads((sharded / INDEX_FILE).read_text())
    assert index["metadata"]["total_size"] > 0
    a, b = load_state_dict(single), load_state_dict(sharded)
    assert a.keys() == b.keys() == set(index["weight_map"])
    assert "lm_head.weight" in a
    for name in a:
        assert torch.equal(a[name], b[name]), name


def test_dtype_cast_and_single_file_path(tiny_model_dir: TinyFactory) -> None:
    d = tiny_model_dir()
    state = load_state_dict(d / SINGLE_FILE, dtype=torch.bfloat16)
    assert all(t.dtype == torch.bfloat16 for t in state.values())
    assert checkpoint_files(d) == {d / SINGLE_FILE: None}


def test_bf16_checkpoint_loads_as_fp32(tiny_model_dir: TinyFactory) -> None:
    state = load_state_dict(tiny_model_dir(dtype="bfloat16"), dtype=torch.float32)
    assert all(t.dtype == torch.float32 for t in state.values())


def test_missing_weights_fail_clearly(tmp_path: Path, tiny_model_dir: TinyFactory) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_state_dict(tmp_path / "absent")
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match=r"no model\.safetensors.*config\.json"):
        load_state_dict(tmp_path)
    d = _copy(tiny_model_dir(shards=2), tmp_path / "m")
    (d / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="model-00002-of-00002"):
        load_state_dict(d)


def test_index_pointing_at_wrong_shard_fails(tmp_path: Path, tiny_model_dir: TinyFactory) -> None:
    d = _copy(tiny_model_dir(shards=2), tmp_path / "m")
    index = json.loads((d / INDEX_FILE).read_text())
    index["weight_map"]["model.norm.weight"] = "model-00001-of-00002.safetensors"
    (d / INDEX_FILE).write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match=r"model\.norm\.weight"):
        load_state_dict(d)


def test_unindexed_files_are_read_and_duplicates_rejected(
    tmp_path: Path, tiny_model_dir: TinyFactory
) -> None:
    d = _copy(tiny_model_dir(), tmp_path / "m")
    (d / SINGLE_FILE).rename(d / "weights.safetensors")
    assert "model.norm.weight" in load_state_dict(d)
    shutil.copy(d / "weights.safetensors", d / "copy.safetensors")
    with pytest.raises(CheckpointError, match="more than one file"):
        load_state_dict(d)


def _edit_state(d: Path, edit: dict[str, torch.Tensor | None]) -> None:
    state = load_file(str(d / SINGLE_FILE))
    for name, tensor in edit.items():
        if tensor is None:
            del state[name]
        else:
            state[name] = tensor
    save_file(state, str(d / SINGLE_FILE))


def test_model_load_rejects_missing_unexpected_and_misshapen(
    tmp_path: Path, tiny_model_dir: TinyFactory
) -> None:
    src = tiny_model_dir(tie_word_embeddings=False)
    cases: dict[str, tuple[dict[str, torch.Tensor | None], str]] = {
        "missing": ({"model.layers.1.mlp.up_proj.weight": None}, r"missing.*layers\.1\.mlp\.up"),
        "lm_head": ({"lm_head.weight": None}, r"missing tensors \[lm_head\.weight\]"),
        "extra": ({"model.extra.weight": torch.zeros(2)}, r"unexpected.*model\.extra\.weight"),
        "shape": ({"model.norm.weight": torch.ones(65)}, r"norm\.weight: checkpoint \(65,\)"),
    }
    for name, (edit, match) in cases.items():
        d = _copy(src, tmp_path / name)
        _edit_state(d, edit)
        with pytest.raises(CheckpointError, match=match):
            CausalLM.from_pretrained(d)


def test_config_checkpoint_mismatch_is_reported(
    tmp_path: Path, tiny_model_dir: TinyFactory
) -> None:
    d = _copy(tiny_model_dir(), tmp_path / "m")
    cfg = json.loads((d / "config.json").read_text())
    cfg["intermediate_size"] = 96
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=r"shape mismatches.*gate_proj"):
        CausalLM.from_pretrained(d)


def test_tied_model_tolerates_stored_head_and_stale_rope_buffers(
    tmp_path: Path, tiny_model_dir: TinyFactory
) -> None:
    d = _copy(tiny_model_dir(), tmp_path / "m")
    _edit_state(
        d,
        {
            "lm_head.weight": torch.zeros(67, 64),
            "model.layers.0.self_attn.rotary_emb.inv_freq": torch.zeros(8),
        },
    )
    model = CausalLM.from_pretrained(d)
    assert model.lm_head is None
    assert model.lm_head_weight is model.model.embed_tokens.weight
    assert "lm_head.weight" not in model.state_dict()
