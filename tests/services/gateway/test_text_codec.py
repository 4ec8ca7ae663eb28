"""Tokenizer and chat template on the gateway side (no transformers, no torch needed)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.services.decoder.conftest import SidModel
from widebeam.services.gateway.chat_template import chatml
from widebeam.services.gateway.text_codec import TextCodec
from widebeam.services.http.errors import ApiError

MESSAGES = [{"role": "system", "content": "<t_5>"}, {"role": "user", "content": "<t_1><t_2>"}]
TEMPLATE = (
    "{% for m in messages %}{% if m.role == 'tool' %}{{ raise_exception('no tools') }}{% endif %}"
    "<|im_start|>{{ m.role }}{{ m.content }}<|im_end|>{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>{{ eos_token }}{% endif %}"
)


def copy_tokenizer(sid_model: SidModel, dest: Path, **config: object) -> Path:
    dest.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(sid_model.model_dir / name, dest / name)
    data = json.loads((dest / "tokenizer_config.json").read_text()) | config
    (dest / "tokenizer_config.json").write_text(json.dumps(data))
    return dest


def test_fallback_is_chatml(sid_model: SidModel) -> None:
    codec = TextCodec.load(sid_model.model_dir)
    assert codec is not None and codec.chat.source == "chatml (fallback)"
    ids = codec.chat_prompt(MESSAGES)
    assert ids == codec.encode(chatml(MESSAGES), add_special_tokens=False)
    assert codec.decode(codec.encode("<t_1><s_a_3>")) == "<t_1><s_a_3>"


def test_model_template_is_used(sid_model: SidModel, tmp_path: Path) -> None:
    codec = TextCodec.load(copy_tokenizer(sid_model, tmp_path / "tok", chat_template=TEMPLATE))
    assert codec is not None and codec.chat.source == "model chat template"
    text = codec.chat.render(MESSAGES)
    assert text == "<|im_start|>system<t_5><|im_end|><|im_start|>user<t_1><t_2><|im_end|>" + (
        "<|im_start|><|im_end|>"
    )
    with pytest.raises(ApiError, match="no tools") as info:
        codec.chat.render([{"role": "tool", "content": "x"}])
    assert info.value.status == 400


def test_template_file_and_named_templates(sid_model: SidModel, tmp_path: Path) -> None:
    named = [{"name": "default", "template": "A{{ messages[0].content }}"}]
    codec = TextCodec.load(copy_tokenizer(sid_model, tmp_path / "named", chat_template=named))
    assert codec is not None and codec.chat.render(MESSAGES) == "A<t_5>"
    jinja_dir = copy_tokenizer(sid_model, tmp_path / "file", chat_template="ignored")
    (jinja_dir / "chat_template.jinja").write_text("B{{ messages[1].content }}")
    codec = TextCodec.load(jinja_dir)
    assert codec is not None and codec.chat.render(MESSAGES) == "B<t_1><t_2>"


def test_broken_template_falls_back(sid_model: SidModel, tmp_path: Path) -> None:
    codec = TextCodec.load(copy_tokenizer(sid_model, tmp_path / "bad", chat_template="{% if %}"))
    assert codec is not None and codec.chat.source == "chatml (fallback)"


def test_no_tokenizer(tmp_path: Path) -> None:
    assert TextCodec.load(tmp_path) is None
