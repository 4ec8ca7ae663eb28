"""`GET /v1/items` over real HTTP: the items file searched by id prefix and title, paginated,
exact ids, behind the API key, every bad parameter a 400 naming it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.services.gateway.items_support import (
    ITEMS_KEY,
    titles_and_gateway,  # noqa: F401 (fixture)
)
from tests.services.gateway.support import GatewayServer, gateway_settings
from widebeam.services.decoder.server.background import BackgroundServer
from widebeam.services.gateway.routes.items import MAX_IDS, MAX_LIMIT, MAX_OFFSET

Gateway = tuple[dict[str, str], GatewayServer]


@pytest.fixture
def http(titles_and_gateway: Gateway) -> Iterator[httpx.Client]:  # noqa: F811
    headers = {"Authorization": f"Bearer {ITEMS_KEY}"}
    with httpx.Client(base_url=titles_and_gateway[1].url, headers=headers, timeout=30) as client:
        yield client


@pytest.fixture
def titles(titles_and_gateway: Gateway) -> dict[str, str]:  # noqa: F811
    return titles_and_gateway[0]


def all_pages(http: httpx.Client, q: str, limit: int) -> list[str]:
    """Every match of `q`, walking `next_offset` page by page."""
    found: list[str] = []
    offset: int | None = 0
    while offset is not None:
        page = http.get("/v1/items", params={"q": q, "offset": offset, "limit": limit}).json()
        assert len(page["items"]) <= limit
        found += [item["item_id"] for item in page["items"]]
        offset = page["next_offset"]
    return found


def test_needs_the_api_key(titles_and_gateway: Gateway) -> None:  # noqa: F811
    response = httpx.get(f"{titles_and_gateway[1].url}/v1/items", params={"q": "item-1"})
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_api_key"


def test_id_prefix_in_id_order(http: httpx.Client, titles: dict[str, str]) -> None:
    page = http.get("/v1/items", params={"q": "item-1", "limit": 5}).json()
    ids = [item["item_id"] for item in page["items"]]
    assert ids == sorted(i for i in titles if i.startswith("item-1"))[:5]
    assert page["next_offset"] == 5
    assert page["total_items"] == len(titles)
    first = page["items"][0]
    assert first["title"] == titles[first["item_id"]]
    assert len(first["sid"]) == 3


def test_title_substring_ignores_case(http: httpx.Client, titles: dict[str, str]) -> None:
    found = all_pages(http, "crimson HARB", limit=7)
    expected = [i for i, t in titles.items() if "crimson harb" in t.lower()]
    assert found == expected  # catalog order
    assert len(expected) > 7  # several pages walked


def test_pages_cover_id_then_title_matches_once(http: httpx.Client, titles: dict[str, str]) -> None:
    # "no. 4" matches titles; "item-4" style ids do not contain it, so this walks title matches;
    # "item-2" walks id matches only. Together: every match exactly once, ids first.
    for query in ("item-2", "no. 4", "Teal"):
        found = all_pages(http, query, limit=9)
        by_id = sorted(i for i in titles if i.startswith(query))
        by_title = [i for i, t in titles.items() if query.lower() in t.lower() and i not in by_id]
        assert found == by_id + by_title, query
        assert found


def test_empty_query_lists_the_catalog(http: httpx.Client, titles: dict[str, str]) -> None:
    assert all_pages(http, "", limit=MAX_LIMIT) == sorted(titles)


def test_no_match(http: httpx.Client) -> None:
    page = http.get("/v1/items", params={"q": "no such thing"}).json()
    assert page["items"] == [] and page["next_offset"] is None


def test_exact_ids_in_the_order_asked(http: httpx.Client, titles: dict[str, str]) -> None:
    params = [("id", "item-7"), ("id", "unknown-item"), ("id", "item-3")]
    page = http.get("/v1/items", params=params).json()
    assert [(i["item_id"], i["title"]) for i in page["items"]] == [
        ("item-7", titles["item-7"]),
        ("item-3", titles["item-3"]),
    ]
    assert page["next_offset"] is None


@pytest.mark.parametrize(
    ("params", "param"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": MAX_LIMIT + 1}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"offset": -1}, "offset"),
        ({"offset": MAX_OFFSET + 1}, "offset"),
        ({"q": "x" * 257}, "q"),
        ({"q": "item", "id": "item-1"}, "id"),
        ([("id", f"item-{i}") for i in range(MAX_IDS + 1)], "id"),
    ],
)
def test_bad_parameters_are_400(http: httpx.Client, params: object, param: str) -> None:
    response = http.get("/v1/items", params=params)  # type: ignore[arg-type]
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert param in str(error["param"]), error
    assert error["message"]


def test_without_an_items_file_404(decoder_server: BackgroundServer) -> None:
    with GatewayServer(gateway_settings([decoder_server.address])) as gw:
        response = httpx.get(f"{gw.url}/v1/items", params={"q": "a"}, timeout=30)
    assert response.status_code == 404
    error = response.json()["error"]
    assert error["code"] == "items_not_configured"
    assert "--items-file" in error["message"]


def test_unreadable_items_file_names_it(tmp_path: Path, decoder_server: BackgroundServer) -> None:
    path = tmp_path / "broken.jsonl"
    path.write_text(json.dumps({"item_id": "a", "sid": [1, 2, 3]}) + "\n{not json\n")
    settings = gateway_settings([decoder_server.address], items_file=str(path))
    with GatewayServer(settings) as gw:
        response = httpx.get(f"{gw.url}/v1/items", params={"q": "a"}, timeout=30)
        assert response.status_code == 500
        assert response.json()["error"]["code"] == "items_file_unreadable"
        assert "broken.jsonl" in response.json()["error"]["message"]
        # fixed in place: the next request reads it again, no restart
        path.write_text(json.dumps({"item_id": "a", "sid": [1, 2, 3], "title": "A"}) + "\n")
        page = httpx.get(f"{gw.url}/v1/items", params={"q": "a"}, timeout=30).json()
    assert page["items"] == [{"item_id": "a", "title": "A", "sid": [1, 2, 3]}]
