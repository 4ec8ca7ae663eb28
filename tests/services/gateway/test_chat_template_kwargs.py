"""`chat_template_kwargs` reach the model's chat template as transformers passes them: the
gateway's rendering of a Qwen3-style template equals transformers' `apply_chat_template(...,
add_generation_prompt=True, **kwargs)`, text and token ids, for every kwargs case."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.services.decoder.conftest import SidModel
from tests.services.gateway.qwen3_style import qwen3_style_tokenizer
from widebeam.services.gateway.chat_template import ChatRenderer
from widebeam.services.gateway.text_codec import TextCodec
from widebeam.services.http.errors import ApiError

transformers = pytest.importorskip("transformers")

CONVERSATIONS: dict[str, list[dict[str, str]]] = {
    "user only": [{"role": "user", "content": "<|sid_begin|><s_a_1><s_b_2><s_c_3><|sid_end|>"}],
    "system and user": [
        {"role": "system", "content": "You recommend videos."},
        {"role": "user", "content": "History: <s_a_1><s_b_2><s_c_3>"},
    ],
    "multi-turn with reasoning": [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "<think>\nhmm\n</think>\n\n<s_a_4>"},
        {"role": "user", "content": "second"},
    ],
    "tool results": [
        {"role": "user", "content": "look it up"},
        {"role": "assistant", "content": "calling"},
        {"role": "tool", "content": "one"},
        {"role": "tool", "content": "two"},
    ],
}
KWARGS: dict[str, dict[str, Any]] = {
    "none": {},
    "thinking off": {"enable_thinking": False},
    "thinking on": {"enable_thinking": True},
    "thinking off, unknown key": {"enable_thinking": False, "reasoning_effort": "low"},
    "special token replaced": {"eos_token": "<|endoftext|>"},
    "tools": {"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]},
}


@pytest.fixture(scope="module")
def model_dir(sid_model: SidModel, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return qwen3_style_tokenizer(sid_model, tmp_path_factory.mktemp("qwen3") / "tok")


@pytest.mark.parametrize("kwargs_case", KWARGS)
@pytest.mark.parametrize("conversation", CONVERSATIONS)
def test_rendering_equals_transformers(
    model_dir: Path, conversation: str, kwargs_case: str
) -> None:
    messages, kwargs = CONVERSATIONS[conversation], KWARGS[kwargs_case]
    hf = transformers.AutoTokenizer.from_pretrained(str(model_dir))
    expected = hf.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True, **kwargs
    )
    codec = TextCodec.load(model_dir)
    assert codec is not None and codec.chat.source == "model chat template"
    assert codec.chat.render(messages, kwargs) == expected
    expected_ids = hf.apply_chat_template(
        messages, tokenize=True, add_generation_prompt=True, return_dict=False, **kwargs
    )
    assert codec.chat_prompt(messages, kwargs) == list(expected_ids)


def test_enable_thinking_false_adds_the_empty_think_block(model_dir: Path) -> None:
    codec = TextCodec.load(model_dir)
    assert codec is not None
    messages = CONVERSATIONS["user only"]
    off = codec.chat.render(messages, {"enable_thinking": False})
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert codec.chat.render(messages, {}).endswith("<|im_start|>assistant\n")
    assert codec.chat.render(messages, {"enable_thinking": True}) == codec.chat.render(messages)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"add_generation_prompt": False}, "chat_template_kwargs.add_generation_prompt"),
        ({"messages": []}, "chat_template_kwargs.messages"),
        ({"tokenize": True}, "chat_template_kwargs.tokenize"),
        ({"tools": "f"}, "chat_template_kwargs.tools must be a list of JSON objects"),
        ({"documents": [1]}, "chat_template_kwargs.documents must be a list"),
    ],
)
def test_reserved_keys_are_a_400(model_dir: Path, kwargs: dict[str, Any], message: str) -> None:
    codec = TextCodec.load(model_dir)
    assert codec is not None
    with pytest.raises(ApiError, match=message) as info:
        codec.chat.render(CONVERSATIONS["user only"], kwargs)
    assert info.value.status == 400 and info.value.param == "chat_template_kwargs"


def test_generation_blocks_render_their_body() -> None:
    """transformers' `{% generation %}` tag (assistant-token masks) compiles and renders."""
    template = (
        "{% for m in messages %}{% generation %}[{{ m.content }}]{% endgeneration %}{% endfor %}"
    )
    renderer = ChatRenderer(template, {})
    assert renderer.source == "model chat template"
    assert renderer.render([{"role": "user", "content": "x"}]) == "[x]"
