"""FlashRec's chat requests, sent as its clients send them, through the official `openai` client
against a real gateway and decoder: `model: "flashrec"` (a `--served-model-name` alias), `n` =
beams, `max_tokens` and `max_completion_tokens` both set, `chat_template_kwargs:
{"enable_thinking": false}` into a Qwen3-style template, no `constrained` field with
`default_constrained` on. The beams are constrained, scored, and equal `/v1/completions`' for
the prompt transformers renders; `sglext.sequence_score` is the beam's score."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.services.decoder.conftest import SidModel
from tests.services.gateway.qwen3_style import qwen3_style_tokenizer
from tests.services.gateway.support import GatewayServer, gateway_settings
from widebeam.cli import build_parser
from widebeam.services.decoder.server.background import BackgroundServer
from widebeam.services.gateway.cli import settings_from_args
from widebeam.services.gateway.settings import GatewaySettings

transformers = pytest.importorskip("transformers")

SID_TEXT = re.compile(r"^<\|sid_begin\|>(<s_a_\d+>)(<s_b_\d+>)(<s_c_\d+>)<\|sid_end\|>$")
MESSAGES = [
    {"role": "system", "content": "Recommend the next item."},
    {"role": "user", "content": "<|sid_begin|><s_a_1><s_b_2><s_c_3><|sid_end|>"},
]
BEAMS = 8


@pytest.fixture(scope="module")
def model_dir(sid_model: SidModel, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return qwen3_style_tokenizer(sid_model, tmp_path_factory.mktemp("flashrec") / "tok")


@pytest.fixture(scope="module")
def flashrec_gateway(decoder_server: BackgroundServer, model_dir: Path) -> Iterator[GatewayServer]:
    settings = gateway_settings(
        [decoder_server.address],
        model_dir=str(model_dir),
        served_model_names=["flashrec", "onerec"],
        default_constrained=["*"],
    )
    with GatewayServer(settings) as gw:
        yield gw


@pytest.fixture(scope="module")
def oai(flashrec_gateway: GatewayServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{flashrec_gateway.url}/v1", api_key="none", max_retries=0)


@pytest.fixture
def http(flashrec_gateway: GatewayServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=flashrec_gateway.url, timeout=60) as client:
        yield client


def flashrec_chat(oai: openai.OpenAI, **overrides: Any) -> Any:
    """The request FlashRec's benchmark and RecIF clients send (python/flashrec/benchmark)."""
    fields: dict[str, Any] = {
        "model": "flashrec",
        "messages": MESSAGES,
        "n": BEAMS,
        "max_tokens": 5,
        "max_completion_tokens": 5,
        "temperature": 0.0,
        "extra_body": {"chat_template_kwargs": {"enable_thinking": False}},
    }
    return oai.chat.completions.create(**(fields | overrides))


def transformers_prompt_ids(model_dir: Path, **kwargs: Any) -> list[int]:
    hf = transformers.AutoTokenizer.from_pretrained(str(model_dir))
    ids = hf.apply_chat_template(
        MESSAGES, tokenize=True, add_generation_prompt=True, return_dict=False, **kwargs
    )
    return list(ids)


def test_flashrec_chat_gets_constrained_scored_beams(
    oai: openai.OpenAI,
    http: httpx.Client,
    model_dir: Path,
    catalog_of: dict[str, tuple[int, ...]],
) -> None:
    out = flashrec_chat(oai)
    assert out.model == "flashrec" and len(out.choices) == BEAMS
    info = http.get("/v1/models").json()["data"][0]
    served = {c["name"]: c["version"] for c in info["catalogs"]}
    assert out.model_extra["catalog"] == {"name": "default", "version": served["default"]}
    scores = []
    for choice in out.choices:
        match = SID_TEXT.match(choice.message.content or "")
        assert match, choice.message.content
        codes = tuple(int(re.findall(r"\d+", group)[0]) for group in match.groups())
        items = choice.model_extra["item_ids"]
        assert items and all(catalog_of[item] == codes for item in items)
        score = choice.model_extra["sglext"]["sequence_score"]
        assert score == choice.model_extra["sequence_score"]
        scores.append(score)
    assert scores == sorted(scores, reverse=True)
    # The prompt is transformers' rendering with enable_thinking=False, token for token.
    ids = transformers_prompt_ids(model_dir, enable_thinking=False)
    assert ids != transformers_prompt_ids(model_dir)  # the switch changes the prompt
    assert out.usage is not None and out.usage.prompt_tokens == len(ids)
    # ... and its beams are /v1/completions' beams for that prompt (explicitly constrained).
    body = {"model": "model", "prompt": ids, "n": BEAMS, "max_tokens": 5, "constrained": True}
    # Scores to 1e-5, not bit for bit: the second request may read the first's prompt from the
    # prefix cache, whose hit rounds fp32 rows apart (tests/services/decoder/test_prefix_cache.py).
    completions = http.post("/v1/completions", json=body).json()
    assert [c["text"] for c in completions["choices"]] == [c.message.content for c in out.choices]
    assert [c["sequence_score"] for c in completions["choices"]] == pytest.approx(scores, rel=1e-5)
    sglext = [c["sglext"]["sequence_score"] for c in completions["choices"]]
    assert sglext == [c["sequence_score"] for c in completions["choices"]]


def test_thinking_switch_and_unknown_template_keys(oai: openai.OpenAI, model_dir: Path) -> None:
    thinking = flashrec_chat(oai, extra_body={"chat_template_kwargs": {"enable_thinking": True}})
    assert thinking.usage is not None
    assert thinking.usage.prompt_tokens == len(transformers_prompt_ids(model_dir))
    # A key the template never reads changes nothing, as in transformers.
    extra = {"chat_template_kwargs": {"enable_thinking": False, "not_read": [1, {"a": 2}]}}
    unknown = flashrec_chat(oai, extra_body=extra)
    plain = flashrec_chat(oai)
    assert [c.message.content for c in unknown.choices] == [
        c.message.content for c in plain.choices
    ]


def test_names_model_field_and_default_constrained(http: httpx.Client) -> None:
    models = http.get("/v1/models").json()["data"]
    assert [m["id"] for m in models] == ["model", "flashrec", "onerec"]
    assert http.get("/v1/models/onerec").json()["id"] == "onerec"
    assert http.get("/v1/models/other").status_code == 404
    # No model: the served model's own name; no constrained: the default (on for every name).
    body = {"messages": MESSAGES[1:], "n": 2, "max_tokens": 5}
    out = http.post("/v1/chat/completions", json=body).json()
    assert out["model"] == "model" and out["catalog"]["name"] == "default"
    assert all(c["item_ids"] for c in out["choices"])
    # constrained: false is still honoured, and then there is no catalog.
    free = http.post("/v1/chat/completions", json=body | {"constrained": False}).json()
    assert "catalog" not in free and "item_ids" not in free["choices"][0]
    missing = http.post("/v1/chat/completions", json=body | {"model": "gpt-4"})
    assert missing.status_code == 404
    assert "available: model, flashrec, onerec" in missing.json()["error"]["message"]


def test_default_constrained_per_served_name(
    decoder_server: BackgroundServer, model_dir: Path
) -> None:
    settings = gateway_settings(
        [decoder_server.address],
        model_dir=str(model_dir),
        served_model_names=["flashrec"],
        default_constrained=["flashrec"],
    )
    body = {"messages": MESSAGES[1:], "n": 2, "max_tokens": 5}
    with GatewayServer(settings) as gw, httpx.Client(base_url=gw.url, timeout=60) as client:
        aliased = client.post("/v1/chat/completions", json=body | {"model": "flashrec"}).json()
        assert aliased["catalog"]["name"] == "default"
        own = client.post("/v1/chat/completions", json=body | {"model": "model"}).json()
        assert "catalog" not in own


def test_default_constrained_names_must_be_served(decoder_server: BackgroundServer) -> None:
    with pytest.raises(ValueError, match=r"default_constrained names \['onerec'\] are not served"):
        gateway_settings(
            [decoder_server.address],
            served_model_names=["flashrec"],
            default_constrained=["onerec"],
        )


def test_flags_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    def parse(*flags: str) -> GatewaySettings:
        return settings_from_args(build_parser().parse_args(["gateway", "serve", *flags]))

    both = parse("--served-model-name", "flashrec", "onerec", "--served-model-name", "x")
    assert both.served_model_names == ["flashrec", "onerec", "x"] and both.default_constrained == []
    assert parse("--default-constrained").default_constrained == ["*"]
    named = parse("--served-model-name", "flashrec", "--default-constrained", "flashrec")
    assert named.default_constrained == ["flashrec"]
    with pytest.raises(ValueError, match="default_constrained names"):
        parse("--default-constrained", "flashrec")
    monkeypatch.setenv("WIDEBEAM_GATEWAY_SERVED_MODEL_NAMES", "flashrec, onerec")
    monkeypatch.setenv("WIDEBEAM_GATEWAY_DEFAULT_CONSTRAINED", "onerec")
    env = GatewaySettings()
    assert env.served_model_names == ["flashrec", "onerec"]
    assert env.default_constrained == ["onerec"]
