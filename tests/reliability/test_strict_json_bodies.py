"""Every JSON request body of the gateway is read strictly, over real HTTP (real decoder and
Redis behind it): a batch body nested 1,100 deep or holding a 5,000-digit integer is a 400
(it was a 500 and a dropped connection); duplicate keys, `NaN`, and numbers or flags written
as another type (`"n": true`, `"n": "3"`) are 400s naming what is wrong, on recommend,
completions, chat and batch submissions alike (they were served as `n = 2`, 1 and 3)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.reliability.support import GatewayApp

REC = "/v1/recommend"
CMPL = "/v1/completions"
CHAT = "/v1/chat/completions"
BATCH = "/v1/batch-jobs"
ROW = {"history": ["item-3", "item-17"], "n": 2, "beam_width": 2}
BODIES: dict[str, dict[str, Any]] = {
    REC: ROW,
    CMPL: {"model": "model", "prompt": [1, 2], "max_tokens": 2, "n": 2, "beam_width": 2},
    CHAT: {"model": "model", "messages": [{"role": "user", "content": "<t_1>"}], "n": 2,
           "beam_width": 2, "max_tokens": 2},
    BATCH: {"requests": [ROW]},
}  # fmt: skip
DEEP = "[" * 1100 + "]" * 1100
HUGE_INT = "1" * 5000


def post_raw(http: httpx.Client, path: str, text: str, content_type: str) -> httpx.Response:
    return http.post(path, content=text.encode(), headers={"Content-Type": content_type})


def json_text(body: dict[str, Any], *raw: tuple[str, str]) -> str:
    """`body` as JSON with the `raw` (key, value) pairs appended as written: repeated keys,
    NaN, long digit strings."""
    text = json.dumps(body)[:-1]
    return text + "".join(f', "{key}": {value}' for key, value in raw) + "}"


def without_n(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k != "n"}


def batch_text(*raw: tuple[str, str]) -> str:
    """A batch body whose one row (without `n`) has the `raw` pairs appended."""
    return '{"requests": [' + json_text(without_n(ROW), *raw) + "]}"


@pytest.fixture
def http(rel_gateway: GatewayApp) -> httpx.Client:
    return httpx.Client(base_url=rel_gateway.url, timeout=60)


def assert_400(response: httpx.Response, message: str, param: str | None = None) -> None:
    """A 400 whose message has `message` and, when given, whose `param` is `param`."""
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert message in error["message"], error
    assert param is None or error["param"] == param, error


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"requests": [' + DEEP + "]}", "nested too deeply"),
        ('{"requests": [{"history": ["item-3"], "n": ' + HUGE_INT + "}]}", "is too long"),
        ('{"requests": [{"history": ["item-3"], "n": 2}], "x": ' + DEEP + "}", "nested too"),
    ],
)
def test_hostile_batch_bodies_are_400_and_keep_the_connection(
    http: httpx.Client, text: str, message: str
) -> None:
    assert_400(post_raw(http, BATCH, text, "application/json"), message)
    # The same connection still serves: the error was an answer, not a crash.
    assert http.post(REC, json=ROW).status_code == 200


@pytest.mark.parametrize(
    "line",
    [DEEP, '{"history": ["item-3"], "n": ' + HUGE_INT + "}", json_text(ROW, ("x", "NaN"))],
    ids=["deep", "long-int", "nan"],
)
def test_hostile_jsonl_lines_are_400(http: httpx.Client, line: str) -> None:
    response = post_raw(http, BATCH, json.dumps(ROW) + "\n" + line + "\n", "application/x-ndjson")
    assert_400(response, "line 2: invalid JSON", "file")


@pytest.mark.parametrize("path", [REC, CMPL, CHAT])
@pytest.mark.parametrize(
    "raw",
    [DEEP, '{"n": ' + HUGE_INT + "}", '{"n": 2, "x": ' + DEEP + "}"],
    ids=["deep", "long-int", "deep-field"],
)
def test_hostile_bodies_of_the_model_routes_are_400(
    http: httpx.Client, path: str, raw: str
) -> None:
    assert_400(post_raw(http, path, raw, "application/json"), "malformed JSON body")


@pytest.mark.parametrize("path", [REC, CMPL, CHAT, BATCH])
def test_duplicate_keys_are_refused(http: httpx.Client, path: str) -> None:
    # {"n": 500, "n": 2}: the last key used to win, so a request over the limit was served.
    pairs = (("n", "500"), ("n", "2"))
    text = json_text(without_n(BODIES[path]), *pairs) if path != BATCH else batch_text(*pairs)
    assert_400(post_raw(http, path, text, "application/json"), "duplicate key 'n'", "n")


def test_duplicate_keys_in_a_jsonl_line_are_refused(http: httpx.Client) -> None:
    line = json_text(without_n(ROW), ("n", "500"), ("n", "2"))
    response = post_raw(http, BATCH, line + "\n", "application/x-ndjson")
    assert_400(response, "line 1: invalid JSON: duplicate key 'n'", "file")


@pytest.mark.parametrize("path", [REC, CMPL, CHAT, BATCH])
@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_refused(http: httpx.Client, path: str, constant: str) -> None:
    pair = ("n", constant)
    text = json_text(without_n(BODIES[path]), pair) if path != BATCH else batch_text(pair)
    assert_400(post_raw(http, path, text, "application/json"), f"{constant} is not a JSON number")


STRICT_FIELDS: dict[str, list[tuple[str, Any]]] = {
    REC: [("n", True), ("n", "3"), ("n", 2.0), ("beam_width", "2"), ("exclude_history", 1),
          ("skip_unknown_items", "false")],
    CMPL: [("n", True), ("n", "2"), ("max_tokens", "2"), ("beam_width", True),
           ("temperature", "0"), ("constrained", "false"), ("ignore_eos", 0), ("logprobs", False),
           ("prompt", [True, 2]), ("early_stopping", "true"), ("seed", "1")],
    CHAT: [("n", "2"), ("max_tokens", True), ("logprobs", 1), ("top_p", "1"), ("stream", 0)],
}  # fmt: skip


@pytest.mark.parametrize(
    ("path", "field", "value"),
    [(path, f, v) for path, cases in STRICT_FIELDS.items() for f, v in cases],
)
def test_values_of_another_type_are_not_coerced(
    http: httpx.Client, path: str, field: str, value: Any
) -> None:
    response = http.post(path, json=BODIES[path] | {field: value})
    assert_400(response, field)
    assert response.json()["error"]["param"].split(".")[0] == field  # e.g. "prompt.str"


@pytest.mark.parametrize(("field", "value"), STRICT_FIELDS[REC])
def test_batch_rows_are_as_strict_as_recommend(http: httpx.Client, field: str, value: Any) -> None:
    response = http.post(BATCH, json={"requests": [ROW | {field: value}]})
    assert_400(response, f"requests[0]: {field}", "requests[0]")


def test_the_strict_reading_still_serves_plain_json(http: httpx.Client) -> None:
    """What JSON means stays served: integers for float fields, 30-digit integers (refused by
    the limits, not the parser), nested objects, escapes."""
    assert http.post(REC, json=ROW | {"user_id": "caf\u00e9 \u2603"}).status_code == 200
    cmpl = BODIES[CMPL] | {"temperature": 0, "length_penalty": 1, "n": 1, "beam_width": 1}
    assert http.post(CMPL, json=cmpl).status_code == 200
    assert_400(http.post(REC, json=ROW | {"n": 10**29}), "n must be <=", "n")
    assert http.post(BATCH, json={"requests": [ROW, ROW], "catalog": "default"}).status_code == 202
