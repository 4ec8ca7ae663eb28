"""`exclude` has a documented limit (`WIDEBEAM_GATEWAY_MAX_EXCLUDE`, 10,000), the same one for
`/v1/recommend` and for batch rows: over it is a 400 naming the field and the limit. Before,
`/v1/recommend` served 350,000 exclude ids (200 after 1.15 s) while batch rows had a limit."""

from __future__ import annotations

import httpx
import pytest

from tests.reliability.support import GatewayApp

ROW = {"history": ["item-3", "item-17"], "n": 2, "beam_width": 2}
LIMIT = 10_000  # the default


@pytest.fixture
def http(rel_gateway: GatewayApp) -> httpx.Client:
    assert rel_gateway.settings.max_exclude == LIMIT
    return httpx.Client(base_url=rel_gateway.url, timeout=120)


def excluding(count: int) -> dict[str, object]:
    # Integer ids (they mean their decimal strings): 350,000 of them fit the 4 MiB body limit.
    return ROW | {"exclude": list(range(10**6, 10**6 + count))}


def test_recommend_serves_up_to_the_limit(http: httpx.Client) -> None:
    response = http.post("/v1/recommend", json=excluding(LIMIT))
    assert response.status_code == 200, response.text
    assert len(response.json()["items"]) == 2


@pytest.mark.parametrize("count", [LIMIT + 1, 350_000])
def test_recommend_over_the_limit_is_a_400(http: httpx.Client, count: int) -> None:
    response = http.post("/v1/recommend", json=excluding(count))
    assert response.status_code == 400, response.text[:500]
    error = response.json()["error"]
    assert error["param"] == "exclude"
    assert f"exclude has {count} items; the limit is {LIMIT}" in error["message"]


def test_a_batch_row_has_the_same_limit(http: httpx.Client) -> None:
    ok = http.post("/v1/batch-jobs", json={"requests": [ROW, excluding(LIMIT)]})
    assert ok.status_code == 202, ok.text[:500]
    over = http.post("/v1/batch-jobs", json={"requests": [ROW, excluding(LIMIT + 1)]})
    assert over.status_code == 400, over.text[:500]
    error = over.json()["error"]
    assert error["param"] == "requests[1]"
    assert f"requests[1]: exclude has {LIMIT + 1} items; the limit is {LIMIT}" in error["message"]
