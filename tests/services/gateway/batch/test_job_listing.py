"""`GET /v1/batch-jobs`: a real gateway over real Redis lists the caller's jobs newest first, a
page at a time by cursor; one key never sees another's jobs; pages do not shift when jobs are
created between them; expired jobs drop out; bad `limit` / `after` are a 400 naming them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
import redis

from tests.services.gateway.support import GatewayServer, bearer
from widebeam.services.gateway.batch.job_listing import index_key
from widebeam.services.gateway.batch.ownership import owner_hash
from widebeam.services.gateway.batch.settings import BatchSettings

KEYS = ("list-Key-0ne-51b2", "list-Key-tw0-c07e")
ROWS = {"requests": [{"history": ["item-3", "item-7"], "n": 2}]}


def submit(http: httpx.Client, key: str) -> str:
    answer = http.post("/v1/batch-jobs", json=ROWS, headers=bearer(key))
    assert answer.status_code == 202, answer.text
    return str(answer.json()["id"])


def listed(http: httpx.Client, key: str, **params: Any) -> dict[str, Any]:
    answer = http.get("/v1/batch-jobs", params=params, headers=bearer(key))
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def every_page(http: httpx.Client, key: str, limit: int) -> list[str]:
    ids: list[str] = []
    page = listed(http, key, limit=limit)
    while True:
        ids += [job["id"] for job in page["data"]]
        assert len(page["data"]) <= limit
        if not page["has_more"]:
            return ids
        page = listed(http, key, limit=limit, after=page["last_id"])


def test_each_key_lists_only_its_jobs_newest_first(
    start_gateway: Callable[..., GatewayServer],
) -> None:
    server = start_gateway(api_keys=",".join(KEYS))
    with httpx.Client(base_url=server.url, timeout=30) as http:
        mine = [submit(http, KEYS[0]) for _ in range(5)]
        theirs = [submit(http, KEYS[1]) for _ in range(2)]
        first = listed(http, KEYS[0])
        assert [job["id"] for job in first["data"]] == mine[::-1]
        assert first["object"] == "list" and first["has_more"] is False
        assert (first["first_id"], first["last_id"]) == (mine[-1], mine[0])
        assert first["data"][0]["status"] == "queued" and first["data"][0]["total"] == 1
        assert [job["id"] for job in listed(http, KEYS[1])["data"]] == theirs[::-1]
        # Pages of 2: 2 + 2 + 1, in order, none repeated.
        assert every_page(http, KEYS[0], 2) == mine[::-1]
        # The other key's job is no cursor for this key: it is not in this key's list.
        wrong = http.get("/v1/batch-jobs", params={"after": theirs[0]}, headers=bearer(KEYS[0]))
        assert wrong.status_code == 400, wrong.text
        assert wrong.json()["error"]["param"] == "after"
        assert wrong.json()["error"]["code"] == "invalid_cursor"


def test_pages_do_not_shift_when_jobs_arrive_between_them(
    start_gateway: Callable[..., GatewayServer],
) -> None:
    server = start_gateway(api_keys=KEYS[0])
    with httpx.Client(base_url=server.url, timeout=30) as http:
        older = [submit(http, KEYS[0]) for _ in range(4)]
        page = listed(http, KEYS[0], limit=2)
        assert [job["id"] for job in page["data"]] == older[:1:-1]
        newer = submit(http, KEYS[0])  # an offset of 2 would now repeat older[2]
        rest = listed(http, KEYS[0], limit=2, after=page["last_id"])
        assert [job["id"] for job in rest["data"]] == older[1::-1]
        assert rest["has_more"] is False
        assert listed(http, KEYS[0], limit=1)["data"][0]["id"] == newer


def test_expired_jobs_are_not_listed_and_leave_the_list(
    start_gateway: Callable[..., GatewayServer], redis_client: redis.Redis
) -> None:
    server = start_gateway(api_keys=KEYS[0])
    namespace = BatchSettings().namespace
    with httpx.Client(base_url=server.url, timeout=30) as http:
        ids = [submit(http, KEYS[0]) for _ in range(4)]
        for job_id in ids[1:3]:  # as if their TTL had passed: the job's keys are gone
            redis_client.delete(f"{namespace}:job:{job_id}")
        page = listed(http, KEYS[0], limit=1)
        assert [job["id"] for job in page["data"]] == [ids[3]] and page["has_more"] is True
        rest = listed(http, KEYS[0], limit=1, after=ids[3])
        assert [job["id"] for job in rest["data"]] == [ids[0]] and rest["has_more"] is False
    members = redis_client.zrange(index_key(namespace, owner_hash(KEYS[0])), 0, -1)
    assert sorted(m.decode() for m in members) == sorted([ids[0], ids[3]])


def test_without_api_keys_every_job_is_listed(start_gateway: Callable[..., GatewayServer]) -> None:
    server = start_gateway()
    with httpx.Client(base_url=server.url, timeout=30) as http:
        ids = [submit(http, KEYS[i % 2]) for i in range(3)]
        assert [job["id"] for job in listed(http, KEYS[1])["data"]] == ids[::-1]


@pytest.mark.parametrize(
    ("params", "param", "says"),
    [
        ({"limit": 0}, "limit", "greater than or equal to 1"),
        ({"limit": 101}, "limit", "less than or equal to 100"),
        ({"limit": "ten"}, "limit", "valid integer"),
        ({"after": "not-a-job-id"}, "after", "32 hex digits"),
        ({"after": "0" * 32}, "after", "no job"),
    ],
)
def test_bad_pagination_is_a_400_naming_the_parameter(
    start_gateway: Callable[..., GatewayServer], params: dict[str, Any], param: str, says: str
) -> None:
    server = start_gateway(api_keys=KEYS[0])
    with httpx.Client(base_url=server.url, timeout=30) as http:
        submit(http, KEYS[0])
        answer = http.get("/v1/batch-jobs", params=params, headers=bearer(KEYS[0]))
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert param in (error["param"] or "") and says in error["message"], error
