"""Every bad input is a 4xx in the OpenAI error shape with a message naming the problem;
nothing a client sends produces a 500."""

from __future__ import annotations

import itertools
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.services.gateway.conftest import HISTORY

REC = "/v1/recommend"
CMPL = "/v1/completions"
CHAT = "/v1/chat/completions"
OK_CMPL: dict[str, Any] = {"model": "model", "prompt": [1, 2], "max_tokens": 2}
OK_CHAT: dict[str, Any] = {"model": "model", "messages": [{"role": "user", "content": "<t_1>"}]}

CASES: list[tuple[str, dict[str, Any], int, str]] = [
    # the list
    (REC, {"history": HISTORY, "catalog": "nope"}, 404, "unknown catalog 'nope'; loaded: default"),
    (REC, {"history": HISTORY, "n": 10, "beam_width": 4}, 400, "n (10) must be <= beam_width (4)"),
    (REC, {"history": HISTORY, "beam_width": 49}, 400, "beam_width must be <= 48"),
    (REC, {"history": []}, 400, "history is empty"),
    (REC, {}, 400, "history is empty"),
    (REC, {"history": ["item-1"] * 1001}, 400, "history has 1001 items; the limit is 1000"),
    # more recommend
    (REC, {"history": HISTORY, "n": 0}, 400, "n: Input should be greater than or equal to 1"),
    # max_n follows the gateway's max_beam_width (48 here) unless set
    (REC, {"history": HISTORY, "n": 49, "beam_width": 200}, 400, "n must be <= 48"),
    (REC, {"history": HISTORY, "n": 10**20}, 400, "n must be <= 48"),
    (REC, {"history": HISTORY, "n": 10**30}, 400, "an integer of 31 characters is too long"),
    (REC, {"history": HISTORY, "n": "ten"}, 400, "n: Input should be a valid integer"),
    (REC, {"history": "item-3"}, 400, "history: Input should be a valid list"),
    (REC, {"history": [True]}, 400, "history.0: item ids are strings or integers"),
    (REC, {"history": [""]}, 400, "history.0: item ids must have 1..512 characters"),
    (REC, {"history": ["ghost"]}, 400, "not in catalog 'default'"),
    (REC, {"history": HISTORY, "bogus": 1}, 400, "unknown field 'bogus'"),
    (REC, {"history": HISTORY, "fallback": "popular"}, 400, "fallback:"),
    (REC, {"history": HISTORY, "catalog": ""}, 400, "catalog:"),
    # completions
    (CMPL, {"prompt": []}, 400, "the prompt is empty"),  # model is optional
    (CMPL, OK_CMPL | {"model": "gpt-4"}, 404, "model 'gpt-4' is not served"),
    (CMPL, OK_CMPL | {"prompt": ""}, 400, "the prompt is empty"),
    (CMPL, OK_CMPL | {"prompt": []}, 400, "the prompt is empty"),
    (CMPL, OK_CMPL | {"prompt": [-1]}, 400, "prompt"),
    (CMPL, OK_CMPL | {"prompt": [10**12]}, 400, "prompt"),
    (CMPL, OK_CMPL | {"prompt": [99999]}, 400, "outside the vocabulary"),
    (CMPL, OK_CMPL | {"prompt": ["<t_1>", "<t_2>"]}, 400, "one prompt per request"),
    (CMPL, OK_CMPL | {"n": 3, "beam_width": 2}, 400, "n (3) must be <= beam_width (2)"),
    (CMPL, OK_CMPL | {"beam_width": 64}, 400, "beam_width must be <= 48"),
    (CMPL, OK_CMPL | {"max_tokens": 5000}, 400, "max_tokens must be <= 1024"),
    (CMPL, OK_CMPL | {"max_tokens": 0}, 400, "max_tokens:"),
    (CMPL, OK_CMPL | {"temperature": 0.7, "beam_width": 2}, 400, "temperature > 0 samples"),
    (CMPL, OK_CMPL | {"temperature": 3}, 400, "temperature:"),
    (CMPL, OK_CMPL | {"stream": 1}, 400, "stream: Input should be a valid boolean"),
    (
        CMPL,
        OK_CMPL | {"stream_options": {"include_usage": True}},
        400,
        "stream_options: only allowed with stream=true",
    ),
    (
        CMPL,
        OK_CMPL | {"stream": True, "stream_options": {"usage": True}},
        400,
        "unknown field 'stream_options.usage'",
    ),
    (CMPL, OK_CMPL | {"stop": ["\n"]}, 400, "stop: stop sequences are not supported"),
    (CMPL, OK_CMPL | {"logprobs": 2}, 400, "only logprobs=0 is supported"),
    (CMPL, OK_CMPL | {"echo": True}, 400, "echo"),
    (CMPL, OK_CMPL | {"best_of": 3}, 400, "best_of"),
    (CMPL, OK_CMPL | {"presence_penalty": 0.5}, 400, "presence_penalty"),
    (CMPL, OK_CMPL | {"catalog": "default"}, 400, "catalog is only used with constrained=true"),
    (CMPL, OK_CMPL | {"constrained": True, "catalog": "nope"}, 404, "unknown catalog 'nope'"),
    (CMPL, OK_CMPL | {"constrained": True}, 400, "needs max_new_tokens >= 5"),
    (CMPL, OK_CMPL | {"functions": []}, 400, "unknown field 'functions'"),
    # chat
    (CHAT, OK_CHAT | {"messages": []}, 400, "messages:"),
    (CHAT, OK_CHAT | {"messages": [{"role": "robot", "content": "x"}]}, 400, "role"),
    (CHAT, OK_CHAT | {"messages": [{"role": "user", "content": 5}]}, 400, "content"),
    (CHAT, OK_CHAT | {"logprobs": True, "top_logprobs": 3}, 400, "top_logprobs"),
    (
        CHAT,
        OK_CHAT | {"max_tokens": 3, "max_completion_tokens": 4},
        400,
        "max_tokens (3) and max_completion_tokens (4) differ",
    ),
    (
        CHAT,
        OK_CHAT | {"chat_template_kwargs": ["enable_thinking"]},
        400,
        "chat_template_kwargs: Input should be a valid dictionary",
    ),
    (
        CHAT,
        OK_CHAT | {"chat_template_kwargs": {"add_generation_prompt": False}},
        400,
        "chat_template_kwargs.add_generation_prompt: not a template variable",
    ),
    (CHAT, OK_CHAT | {"model": "flashrec"}, 404, "model 'flashrec' is not served"),
]


@pytest.mark.parametrize(("path", "body", "status", "message"), CASES)
def test_bad_input_is_a_clear_4xx(
    client: httpx.Client, path: str, body: dict[str, Any], status: int, message: str
) -> None:
    response = client.post(path, json=body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert message in error["message"]
    assert set(error) == {"message", "type", "code", "param"}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"history": ["item-3"', "malformed JSON body"),
        (b"", "the request body is required"),
        (b"[1, 2]", "the request body must be a JSON object"),
        (b'"text"', "the request body must be a JSON object"),
        (b'{"history": ["item-3"], "n": NaN}', "NaN is not a JSON number"),
        (b"\xff\xfe", "malformed JSON body"),
    ],
)
def test_malformed_bodies(client: httpx.Client, content: bytes, message: str) -> None:
    for path in (REC, CMPL, CHAT):
        response = client.post(path, content=content, headers={"content-type": "application/json"})
        assert response.status_code == 400, (path, response.text)
        assert message in response.json()["error"]["message"]


@pytest.mark.parametrize(
    ("path", "content"),
    [
        (REC, b'{"history": ["item-3", "\\ud800"]}'),
        (REC, b'{"history": ["item-3"], "catalog": "\\udc00x"}'),
        (CMPL, b'{"model": "model", "prompt": "<t_1>\\ud800"}'),
        (CHAT, b'{"model": "model", "messages": [{"role": "user", "content": "\\ud800"}]}'),
    ],
)
def test_lone_surrogates_are_rejected(client: httpx.Client, path: str, content: bytes) -> None:
    response = client.post(path, content=content, headers={"content-type": "application/json"})
    assert response.status_code == 400, response.text
    assert "unicode" in response.json()["error"]["message"].lower()


def test_unknown_routes_and_methods(client: httpx.Client) -> None:
    missing = client.get("/v1/nothing-here")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    wrong = client.get(REC)
    assert wrong.status_code == 405 and "error" in wrong.json()


VALUES: list[Any] = [None, True, -1, 0, 2, 2**40, 1.5, "", "x", [], [1], ["item-3"], {}, {"a": 1}]
BASES = {
    REC: {"history": HISTORY, "n": 2, "beam_width": 2},
    CMPL: OK_CMPL | {"n": 1, "beam_width": 2},
    CHAT: OK_CHAT | {"max_tokens": 2, "beam_width": 2},
}
FIELDS = {
    REC: ["history", "n", "beam_width", "catalog", "exclude", "exclude_history", "fallback",
          "skip_unknown_items", "user_id", "normalization"],
    CMPL: ["prompt", "n", "beam_width", "max_tokens", "temperature", "top_p", "top_k", "seed",
           "logprobs", "constrained", "catalog", "length_penalty", "early_stopping", "min_tokens",
           "stop", "user", "model", "normalization"],
    CHAT: ["messages", "n", "max_completion_tokens", "logprobs", "top_logprobs", "constrained",
           "normalization", "chat_template_kwargs", "stream", "stream_options", "model"],
}  # fmt: skip


def test_no_field_value_gives_a_500(client: httpx.Client) -> None:
    """Each field of each route set to each of a set of odd values: never a 5xx."""
    cases = [
        (path, field, value)
        for path, fields in FIELDS.items()
        for field, value in itertools.product(fields, VALUES)
    ]

    def post(case: tuple[str, str, Any]) -> tuple[int, str]:
        path, field, value = case
        response = client.post(path, json=BASES[path] | {field: value})
        return response.status_code, response.text

    # Concurrent, as the decoder batches them: the sweep stays a few seconds.
    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(post, cases))
    for case, (status, text) in zip(cases, results, strict=True):
        assert status < 500, (case, text)
    assert {200, 400} <= {status for status, _ in results}
