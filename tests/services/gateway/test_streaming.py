"""`stream: true` on /v1/completions and /v1/chat/completions over real HTTP: Server-Sent Events
as FlashRec sends beams — one chunk with every choice, the usage chunk when
`stream_options.include_usage`, then `data: [DONE]` — read by the official `openai` client
and as raw bytes; the streamed beams are the non-streamed ones."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest

from tests.services.gateway.support import GatewayServer

CHAT_BODY: dict[str, Any] = {
    "model": "model",
    "messages": [{"role": "user", "content": "<t_1><t_2>"}],
    "n": 3,
    "max_tokens": 4,
}
COMPLETION_BODY: dict[str, Any] = {"model": "model", "prompt": "<t_1><t_2><t_3>", "n": 4,
                                   "max_tokens": 4, "beam_width": 4}  # fmt: skip


@pytest.fixture(scope="module")
def oai(gateway: GatewayServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="not-needed", max_retries=0)


def events(response: httpx.Response) -> list[str]:
    """The `data:` payloads of an event stream, in order."""
    assert response.headers["content-type"].startswith("text/event-stream")
    blocks = [b for b in response.text.split("\n\n") if b]
    assert all(b.startswith("data: ") and "\n" not in b for b in blocks), response.text
    return [b.removeprefix("data: ") for b in blocks]


def test_completion_stream_with_the_openai_client(oai: openai.OpenAI) -> None:
    extra = {"beam_width": COMPLETION_BODY["beam_width"]}
    fields = {k: COMPLETION_BODY[k] for k in ("model", "prompt", "n", "max_tokens")}
    whole = oai.completions.create(**fields, extra_body=extra)
    chunks = list(oai.completions.create(**fields, extra_body=extra, stream=True))
    assert len(chunks) == 1  # one chunk carries every beam
    (chunk,) = chunks
    assert chunk.object == "text_completion" and chunk.model == "model"
    assert [c.index for c in chunk.choices] == [0, 1, 2, 3]
    assert [c.text for c in chunk.choices] == [c.text for c in whole.choices]
    assert [c.finish_reason for c in chunk.choices] == [c.finish_reason for c in whole.choices]
    for streamed, plain in zip(chunk.choices, whole.choices, strict=True):
        assert streamed.model_extra["sequence_score"] == plain.model_extra["sequence_score"]
        assert streamed.model_extra["sglext"] == {
            "sequence_score": plain.model_extra["sequence_score"]
        }
        assert streamed.model_extra["token_ids"] == plain.model_extra["token_ids"]


def test_chat_stream_with_usage(oai: openai.OpenAI) -> None:
    fields = {k: CHAT_BODY[k] for k in ("model", "messages", "n", "max_tokens")}
    whole = oai.chat.completions.create(**fields)
    chunks = list(
        oai.chat.completions.create(**fields, stream=True, stream_options={"include_usage": True})
    )
    assert len(chunks) == 2
    beams, usage = chunks
    assert beams.object == "chat.completion.chunk" and beams.usage is None
    assert [c.delta.role for c in beams.choices] == ["assistant"] * 3
    assert [c.delta.content for c in beams.choices] == [c.message.content for c in whole.choices]
    scores = [c.model_extra["sglext"]["sequence_score"] for c in beams.choices]
    assert scores == [c.model_extra["sequence_score"] for c in whole.choices]
    assert usage.choices == [] and usage.id == beams.id
    assert usage.usage is not None and whole.usage is not None
    assert usage.usage.model_dump() == whole.usage.model_dump()


@pytest.mark.parametrize(("include_usage", "count"), [(True, 3), (False, 2), (None, 2)])
def test_raw_event_stream(client: httpx.Client, include_usage: bool | None, count: int) -> None:
    body: dict[str, Any] = CHAT_BODY | {"stream": True}
    if include_usage is not None:
        body["stream_options"] = {"include_usage": include_usage}
    response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200
    data = events(response)
    assert len(data) == count and data[-1] == "[DONE]"
    first = json.loads(data[0])
    assert first["object"] == "chat.completion.chunk" and len(first["choices"]) == 3
    assert all(c["finish_reason"] in ("stop", "length") for c in first["choices"])
    if include_usage:
        assert first["usage"] is None
        last = json.loads(data[1])
        assert last["choices"] == [] and last["usage"]["total_tokens"] > 0
    else:
        assert "usage" not in first


def test_constrained_stream_reports_the_catalog(client: httpx.Client) -> None:
    body = COMPLETION_BODY | {
        "prompt": "<|sid_begin|><s_a_1><s_b_2><s_c_3><|sid_end|>", "max_tokens": 5,
        "constrained": True, "stream": True,
    }  # fmt: skip
    first = json.loads(events(client.post("/v1/completions", json=body))[0])
    assert first["catalog"]["name"] == "default" and first["catalog"]["version"]
    assert all(c["item_ids"] for c in first["choices"])


def test_bad_streamed_requests_are_json_4xx(client: httpx.Client) -> None:
    bad = client.post("/v1/completions", json=COMPLETION_BODY | {"stream": True, "n": 9})
    assert bad.status_code == 400 and bad.headers["content-type"] == "application/json"
    assert "n (9) must be <= beam_width (4)" in bad.json()["error"]["message"]
    missing = client.post("/v1/chat/completions", json=CHAT_BODY | {"stream": True, "model": "x"})
    assert missing.status_code == 404 and "error" in missing.json()
