"""Answer checks: a right answer passes; each kind of wrong answer is named."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from widebeam.loadgen.checks import problem
from widebeam.loadgen.http_client import Response
from widebeam.loadgen.traffic import CHAT, COMPLETIONS, RECOMMEND, Call

ITEMS = frozenset({"a", "b", "c", "d", "e"})
REC = Call.of("recommend/b4", RECOMMEND, {"history": ["e"], "n": 3, "beam_width": 4})
REC_BODY: dict[str, Any] = {
    "items": [{"item_id": i, "score": -float(n), "sid": [1, 2]} for n, i in enumerate("abc")],
    "catalog": {"name": "default", "version": "v1"}, "beam_width": 4, "exhausted": False,
    "usage": {"prompt_tokens": 3, "completion_tokens": 12, "total_tokens": 15},
}  # fmt: skip
CMPL = Call.of("completions/constrained", COMPLETIONS, {
    "model": "m", "prompt": "x", "n": 2, "max_tokens": 5, "beam_width": 4, "constrained": True,
})  # fmt: skip
CMPL_BODY: dict[str, Any] = {
    "object": "text_completion",
    "choices": [
        {"index": i, "text": "t", "finish_reason": "stop", "sequence_score": s,
         "token_ids": [1, 2, 3], "item_ids": ["a"]}
        for i, s in enumerate((-1.0, -2.0))
    ],
    "usage": {"prompt_tokens": 1, "completion_tokens": 6, "total_tokens": 7},
}  # fmt: skip


def answer(body: Any, status: int = 200, **headers: str) -> Response:
    return Response(status, headers, json.dumps(body).encode())


def changed(body: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(body)
    *parents, last = path.split(".")
    target: Any = out
    for key in parents:
        target = target[int(key)] if key.isdigit() else target[key]
    target[int(last) if last.isdigit() else last] = value
    return out


def test_right_answers_pass() -> None:
    assert problem(REC, answer(REC_BODY), ITEMS) is None
    assert problem(REC, answer(changed(REC_BODY, "exhausted", True)), ITEMS) is None
    assert problem(CMPL, answer(CMPL_BODY), ITEMS) is None
    chat = Call.of("chat/beam", CHAT, {"model": "m", "messages": [], "n": 1, "max_tokens": 3})
    body = {**CMPL_BODY, "object": "chat.completion", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "x"}, "finish_reason": "length",
         "sequence_score": -1.0, "token_ids": [4]}]}  # fmt: skip
    assert problem(chat, answer(body), ITEMS) is None
    assert problem(REC, answer({"error": {}}, 429, **{"retry-after": "2"})) is None


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        ("items", REC_BODY["items"][:2], "2 items for n=3"),
        ("items.1.item_id", "a", "duplicate items"),
        ("items.1.item_id", "e", "item of the history"),
        ("items.1.item_id", "zz", "not in the catalog"),
        ("items.0.score", -9.0, "best first"),
        ("items.0.score", float("nan"), "not finite"),
        ("items.0.sid", [], "without a SID"),
        ("beam_width", 2, "beam width"),
        ("usage.total_tokens", 1, "usage"),
        ("items.0", {"item_id": "a"}, "malformed body"),
    ],
)
def test_wrong_recommendations_are_named(path: str, value: Any, expected: str) -> None:
    found = problem(REC, answer(changed(REC_BODY, path, value)), ITEMS)
    assert found is not None and expected in found


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        ("object", "chat.completion", "object"),
        ("choices", CMPL_BODY["choices"][:1], "1 choices for n=2"),
        ("choices.1.sequence_score", 0.0, "best first"),
        ("choices.0.token_ids", [1] * 6, "6 tokens for max_tokens=5"),
        ("choices.0.item_ids", [], "without catalog items"),
        ("choices.0.finish_reason", "eos", "finish_reason"),
    ],
)
def test_wrong_completions_are_named(path: str, value: Any, expected: str) -> None:
    found = problem(CMPL, answer(changed(CMPL_BODY, path, value)), ITEMS)
    assert found is not None and expected in found


def test_statuses_other_than_200_and_shedding_are_wrong() -> None:
    assert "without a valid Retry-After" in str(problem(REC, answer({"error": {}}, 503)))
    zero = answer({"error": {}}, 429, **{"retry-after": "0"})
    assert "without a valid Retry-After" in str(problem(REC, zero))
    failed = problem(REC, answer({"error": {"message": "boom"}}, 500))
    assert failed == "unexpected 500: boom"
    assert "not JSON" in str(problem(REC, Response(200, {}, b"<html>")))
