"""`normalization` through the gateway: validated by the request bodies, passed on to a real
decoder on every route that carries generation parameters."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.services.gateway.conftest import HISTORY

CMPL = "/v1/completions"
CHAT = "/v1/chat/completions"
REC = "/v1/recommend"
# Two separately batched decoder runs: equal paths may differ by fp32 rounding.
TOLERANCE = 1e-4
CONSTRAINED: dict[str, Any] = {
    "model": "model", "prompt": [1, 2, 3, 4], "n": 16, "beam_width": 16, "max_tokens": 5,
    "constrained": True,
}  # fmt: skip
BASES: dict[str, dict[str, Any]] = {
    CMPL: CONSTRAINED,
    CHAT: {"model": "model", "messages": [{"role": "user", "content": "<t_1>"}], "max_tokens": 2},
    REC: {"history": HISTORY, "n": 2},
}


def post(client: httpx.Client, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post(path, json=body)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


@pytest.mark.parametrize("path", [CMPL, CHAT, REC])
@pytest.mark.parametrize("value", ["full", "SID", "", 1, None, ["sid"]])
def test_other_values_are_a_400_naming_the_field(
    client: httpx.Client, path: str, value: Any
) -> None:
    response = client.post(path, json=BASES[path] | {"normalization": value})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["message"].startswith("normalization: Input should be 'vocab' or 'sid'")
    assert error["param"] == "normalization"


@pytest.mark.parametrize("path", [CMPL, CHAT])
def test_sid_reaches_the_decoder_which_needs_constrained(client: httpx.Client, path: str) -> None:
    body = BASES[path] | {"constrained": False, "normalization": "sid", "max_tokens": 2}
    response = client.post(path, json=body)
    assert response.status_code == 400, response.text
    message = response.json()["error"]["message"]
    assert 'normalization "sid" needs a constrained request' in message


def test_constrained_completion_scores_rise_with_sid(client: httpx.Client) -> None:
    def by_path(**extra: Any) -> dict[tuple[int, ...], float]:
        choices = post(client, CMPL, CONSTRAINED | extra)["choices"]
        assert len(choices) == 16
        return {tuple(c["token_ids"]): c["cum_logprob"] for c in choices}

    vocab, sid = by_path(normalization="vocab"), by_path(normalization="sid")
    assert by_path() == pytest.approx(vocab, abs=TOLERANCE)  # the default is "vocab"
    shared = set(vocab) & set(sid)
    assert shared and all(sid[p] >= vocab[p] - TOLERANCE for p in shared)
    assert any(sid[p] > vocab[p] + TOLERANCE for p in shared)


def test_recommend_scores_rise_with_sid(client: httpx.Client) -> None:
    def scores(**extra: Any) -> dict[str, float]:
        body = {"history": HISTORY, "n": 8, "beam_width": 16} | extra
        return {item["item_id"]: item["score"] for item in post(client, REC, body)["items"]}

    vocab, sid = scores(), scores(normalization="sid")
    assert scores(normalization="vocab") == pytest.approx(vocab, abs=TOLERANCE)  # the default
    shared = set(vocab) & set(sid)
    assert shared and all(sid[i] >= vocab[i] - TOLERANCE for i in shared)
    assert any(sid[i] > vocab[i] + TOLERANCE for i in shared)
