"""/v1/recommend against a real decoder: distinct catalog items, exclusions, beam widening."""

from __future__ import annotations

from typing import Any

import httpx

from tests.services.gateway.conftest import HISTORY
from widebeam.services.gateway.schemas.recommend import RecommendResponse


def recommend(client: httpx.Client, **body: Any) -> dict[str, Any]:
    """The answer, checked against the documented schema: the route sends the dict it builds
    without FastAPI's validation (`plain_json`), so this is where its shape is held."""
    response = client.post("/v1/recommend", json={"history": HISTORY} | body)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    assert RecommendResponse.model_validate(result).model_dump(mode="json") == result
    return result


def item_ids(result: dict[str, Any]) -> list[str]:
    return [item["item_id"] for item in result["items"]]


def test_n_distinct_items_from_the_reported_catalog_version(
    client: httpx.Client, catalog_of: dict[str, tuple[int, ...]]
) -> None:
    result = recommend(client, n=10, beam_width=16, user_id="u-1")
    ids = item_ids(result)
    assert len(ids) == len(set(ids)) == 10 and not result["exhausted"]
    ready = client.get("/readyz").json()
    assert result["catalog"] == {"name": "default", "version": ready["catalogs"]["default"]}
    for item in result["items"]:
        assert tuple(item["sid"]) == catalog_of[item["item_id"]]
    scores = [item["score"] for item in result["items"]]
    assert scores == sorted(scores, reverse=True)
    assert result["model"] == "model" and result["latency_ms"] > 0
    usage = result["usage"]
    assert usage["prompt_tokens"] == 5 * len(HISTORY) + 1
    assert usage["completion_tokens"] == 16 * 4
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_history_and_excluded_items_never_appear(client: httpx.Client) -> None:
    with_history = item_ids(recommend(client, n=20, beam_width=32, exclude_history=False))
    default = item_ids(recommend(client, n=20, beam_width=32))
    assert not set(default) & set(HISTORY)
    excluded = with_history[:5]
    again = item_ids(recommend(client, n=20, beam_width=32, exclude=excluded))
    assert len(again) == 20 and not set(again) & (set(excluded) | set(HISTORY))


def test_exclusions_that_starve_the_beam_widen_it(client: httpx.Client) -> None:
    first = recommend(client, n=4, beam_width=4)
    assert first["beam_width"] == 4
    # Excluding what beam 4 found leaves beam 4 with nothing: the gateway must widen.
    again = recommend(client, n=4, beam_width=4, exclude=item_ids(first))
    assert len(item_ids(again)) == 4 and not set(item_ids(again)) & set(item_ids(first))
    assert again["beam_width"] > 4 and not again["exhausted"]
    assert again["usage"]["completion_tokens"] > 4 * 4  # every call's beams are counted
    metrics = client.get("/metrics").text
    assert "widebeam_gateway_recommend_widenings_total" in metrics


def test_exhausted_only_when_no_wider_beam_helps(
    client: httpx.Client, catalog_of: dict[str, tuple[int, ...]]
) -> None:
    everything_but_two = sorted(catalog_of)[2:]
    result = recommend(client, n=5, beam_width=8, exclude=everything_but_two)
    assert result["exhausted"] and len(result["items"]) < 5
    assert result["beam_width"] == 48  # widened up to the gateway's max_beam_width
    assert set(item_ids(result)) <= set(sorted(catalog_of)[:2])


def test_default_beam_width_is_capped_by_the_limit(client: httpx.Client) -> None:
    result = recommend(client, n=3)
    assert result["beam_width"] == 48 and len(result["items"]) == 3


def test_numeric_ids_and_unknown_history_items(client: httpx.Client) -> None:
    response = client.post("/v1/recommend", json={"history": ["item-3", 12345], "n": 2})
    assert response.status_code == 400
    assert "'12345'" in response.json()["error"]["message"]
    result = recommend(client, history=["item-3", 12345, "ghost"], n=2, skip_unknown_items=True)
    assert result["skipped_history_item_ids"] == ["12345", "ghost"]
    assert len(result["items"]) == 2


def test_empty_history_with_the_prior_fallback(client: httpx.Client) -> None:
    result = recommend(client, history=[], n=3, beam_width=4, fallback="prior")
    assert len(item_ids(result)) == 3 and result["usage"]["prompt_tokens"] == 1


def test_a_history_emptied_by_skip_unknown_items_follows_fallback_as_an_empty_one(
    client: httpx.Client,
) -> None:
    empty = {"history": [], "n": 3, "beam_width": 4}
    all_unknown = empty | {"history": ["ghost", 12345, "ghost"], "skip_unknown_items": True}
    answers = {}
    for name, body in (("empty", empty), ("all unknown", all_unknown)):
        refused = client.post("/v1/recommend", json=body)  # fallback "none", the default
        assert refused.status_code == 400, (name, refused.text)
        error = refused.json()["error"]
        assert error["param"] == "history" and "fallback='prior'" in error["message"], name
        answers[name] = recommend(client, **body, fallback="prior")
    assert "'ghost', '12345'" in error["message"] and "catalog 'default'" in error["message"]
    # Both decode the same prompt, the SID begin token alone: the same items.
    assert item_ids(answers["empty"]) == item_ids(answers["all unknown"])
    assert answers["all unknown"]["usage"]["prompt_tokens"] == 1
    assert set(answers["all unknown"]["skipped_history_item_ids"]) == {"ghost", "12345"}
    # One known id is a history: decoded from it, the unknown ones skipped.
    known = recommend(client, **all_unknown | {"history": ["ghost", "item-3"]})
    assert known["skipped_history_item_ids"] == ["ghost"] and len(item_ids(known)) == 3
