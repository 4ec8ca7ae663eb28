"""The official `openai` client against /v1/completions, /v1/chat/completions and /v1/models."""

from __future__ import annotations

import math
import re
from pathlib import Path

import httpx
import openai
import pytest

from tests.services.decoder.conftest import SidModel
from tests.services.gateway.support import GatewayServer, gateway_settings
from tests.services.gateway.test_text_codec import copy_tokenizer
from widebeam.services.decoder.server.background import BackgroundServer

SID_TEXT = re.compile(r"^<\|sid_begin\|>(<s_a_\d+>)(<s_b_\d+>)(<s_c_\d+>)<\|sid_end\|>$")


@pytest.fixture(scope="module")
def oai(gateway: GatewayServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="not-needed", max_retries=0)


def test_beam_request_returns_k_choices_best_first(oai: openai.OpenAI) -> None:
    out = oai.completions.create(
        model="model", prompt="<t_1><t_2><t_3>", n=4, max_tokens=4, extra_body={"beam_width": 4}
    )
    assert [c.index for c in out.choices] == [0, 1, 2, 3]
    scores = [c.model_extra["sequence_score"] for c in out.choices]
    assert scores == sorted(scores, reverse=True)
    texts = [c.text for c in out.choices]
    assert len(set(texts)) == 4 and all(t.startswith("<") for t in texts)
    assert all(c.finish_reason in ("stop", "length") for c in out.choices)
    assert out.usage is not None and out.usage.prompt_tokens == 3
    returned = sum(len(c.model_extra["token_ids"]) for c in out.choices)
    assert out.usage.completion_tokens == returned
    assert out.usage.total_tokens == 3 + returned


def test_token_id_prompt_and_logprobs(oai: openai.OpenAI) -> None:
    out = oai.completions.create(
        model="model", prompt=[1, 2, 3], n=2, max_tokens=3, logprobs=0,
        extra_body={"beam_width": 3},
    )  # fmt: skip
    assert len(out.choices) == 2
    for choice in out.choices:
        assert choice.logprobs is not None
        lps = choice.logprobs.token_logprobs
        assert lps is not None and len(lps) == len(choice.model_extra["token_ids"])
        assert math.isclose(sum(lps), choice.model_extra["cum_logprob"], rel_tol=1e-4)
        assert "".join(choice.logprobs.tokens or []) == choice.text


def test_constrained_choices_are_catalog_items(
    oai: openai.OpenAI, catalog_of: dict[str, tuple[int, ...]]
) -> None:
    out = oai.completions.create(
        model="model", prompt="<|sid_begin|><s_a_1><s_b_2><s_c_3><|sid_end|>", n=6,
        max_tokens=5, extra_body={"beam_width": 8, "constrained": True, "catalog": "default"},
    )  # fmt: skip
    assert len(out.choices) == 6
    assert out.model_extra["catalog"]["name"] == "default"
    for choice in out.choices:
        match = SID_TEXT.match(choice.text)
        assert match, choice.text
        codes = tuple(int(re.findall(r"\d+", g)[0]) for g in match.groups())
        items = choice.model_extra["item_ids"]
        assert items and all(catalog_of[item] == codes for item in items)


def test_chat_completion_with_beams(oai: openai.OpenAI) -> None:
    out = oai.chat.completions.create(
        model="model",
        messages=[
            {"role": "system", "content": "<t_5>"},
            {"role": "user", "content": "<t_1><t_2>"},
        ],
        n=3,
        max_tokens=4,
        logprobs=True,
        extra_body={"beam_width": 3},
    )
    assert [c.index for c in out.choices] == [0, 1, 2]
    for choice in out.choices:
        assert choice.message.role == "assistant" and isinstance(choice.message.content, str)
        assert choice.logprobs is not None and choice.logprobs.content is not None
        assert len(choice.logprobs.content) == len(choice.model_extra["token_ids"])
    # ChatML fallback (the tiny model has no template): 2 turns x 3 specials ... + assistant.
    assert out.usage is not None and out.usage.prompt_tokens > 3


def test_greedy_default_is_one_choice(oai: openai.OpenAI) -> None:
    greedy = oai.completions.create(model="model", prompt=[4, 5], max_tokens=3)
    beam1 = oai.completions.create(
        model="model", prompt=[4, 5], max_tokens=3, extra_body={"beam_width": 1}
    )
    assert len(greedy.choices) == 1 and greedy.choices[0].text == beam1.choices[0].text


def test_models_endpoint(oai: openai.OpenAI) -> None:
    models = oai.models.list()
    assert [m.id for m in models.data] == ["model"]
    assert oai.models.retrieve("model").id == "model"
    with pytest.raises(openai.NotFoundError):
        oai.models.retrieve("gpt-4")


def test_client_errors_surface_as_openai_exceptions(oai: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="must be <= beam_width"):
        oai.completions.create(model="model", prompt=[1], n=4, extra_body={"beam_width": 2})
    with pytest.raises(openai.NotFoundError, match="not served"):
        oai.completions.create(model="gpt-4", prompt=[1])
    with pytest.raises(openai.BadRequestError, match="stream_options: only allowed"):
        oai.completions.create(model="model", prompt=[1], stream_options={"include_usage": True})


def test_without_a_tokenizer_only_token_ids_work(
    decoder_server: BackgroundServer, tmp_path: Path
) -> None:
    settings = gateway_settings([decoder_server.address], model_dir=str(tmp_path))
    with GatewayServer(settings) as gw, httpx.Client(base_url=gw.url, timeout=30) as http:
        text = http.post("/v1/completions", json={"model": "model", "prompt": "<t_1>"})
        assert text.status_code == 400 and "tokenizer" in text.json()["error"]["message"]
        ids = http.post("/v1/completions", json={"model": "model", "prompt": [1], "max_tokens": 2})
        choice = ids.json()["choices"][0]
        assert ids.status_code == 200 and choice["text"] == "" and len(choice["token_ids"]) == 2


def test_chat_uses_the_models_template(
    decoder_server: BackgroundServer, sid_model: SidModel, tmp_path: Path
) -> None:
    template = "{% for m in messages %}<|im_start|>{{ m.content }}{% endfor %}<|im_end|>"
    model_dir = copy_tokenizer(sid_model, tmp_path / "tok", chat_template=template)
    settings = gateway_settings([decoder_server.address], model_dir=str(model_dir))
    with GatewayServer(settings) as gw, httpx.Client(base_url=gw.url, timeout=30) as http:
        messages = [{"role": "user", "content": "<t_1><t_2>"}]
        body = {"model": "model", "messages": messages, "max_tokens": 2}
        out = http.post("/v1/chat/completions", json=body).json()
        assert out["usage"]["prompt_tokens"] == 4  # <|im_start|> <t_1> <t_2> <|im_end|>
