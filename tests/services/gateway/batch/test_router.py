"""`/v1/batch-jobs` without a worker: validation before anything is enqueued, 404s, auth,
status and cancel of queued jobs, results only when finished (or partial on request)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import redis
from fastapi.testclient import TestClient

from tests.services.gateway.batch.conftest import AUTH, batch_settings, make_client, store_of
from widebeam.services.gateway.batch.settings import BatchSettings

GOOD = {"history": ["item-3", "item-17"], "n": 5}


@pytest.fixture
def settings(redis_url: str) -> BatchSettings:
    return batch_settings(redis_url, "127.0.0.1:1", max_upload_bytes=4096, max_job_rows=50)


@pytest.fixture
def client(settings: BatchSettings) -> Iterator[TestClient]:
    with make_client(settings) as c:
        yield c


def nothing_enqueued(client_redis: redis.Redis, settings: BatchSettings) -> bool:
    return not client_redis.keys(f"{settings.namespace}:*") and not client_redis.llen(
        settings.queue
    )


def upload(client: TestClient, text: str) -> dict:
    files = {"file": ("rows.jsonl", text.encode(), "application/jsonl")}
    response = client.post("/v1/batch-jobs", files=files, headers=AUTH)
    return {**response.json(), "http": response.status_code}


def test_inline_submission_is_queued_in_chunks(
    client: TestClient, settings: BatchSettings, redis_client: redis.Redis
) -> None:
    body = {"requests": [GOOD] * 24 + [GOOD | {"catalog": "other"}], "catalog": "books"}
    response = client.post("/v1/batch-jobs", json=body, headers=AUTH)
    assert response.status_code == 202, response.text
    job_id = response.json()["id"]
    assert response.json()["status"] == "queued"
    assert redis_client.llen(settings.queue) == 3  # 25 rows in chunks of 10
    status = client.get(f"/v1/batch-jobs/{job_id}", headers=AUTH).json()
    assert (status["total"], status["done"], status["failed"], status["num_chunks"]) == (
        25,
        0,
        0,
        3,
    )
    assert status["catalog"] == "books" and 0 < status["expires_in_s"] <= settings.result_ttl_s
    rows = store_of(settings).chunk_rows(job_id, 0)
    assert rows is not None and rows[1][0] == GOOD | {
        "beam_width": 16,  # the gateway's default beam, resolved at submission
        "beam_width_defaulted": True,  # so the worker narrows it to the decoders' widest beam
        "catalog": "books",  # the job's catalog: the row names none
        "exclude": [],
        "exclude_history": True,
        "skip_unknown_items": False,
        "fallback": "none",
        "normalization": "vocab",
    }
    last = store_of(settings).chunk_rows(job_id, 2)
    assert last is not None and last[1][-1]["catalog"] == "other"


def test_jsonl_upload_and_ndjson_body(client: TestClient) -> None:
    text = "\n".join(json.dumps(GOOD) for _ in range(3)) + "\n\n"
    assert upload(client, text)["http"] == 202
    response = client.post(
        "/v1/batch-jobs",
        content=text.encode(),
        headers=AUTH | {"Content-Type": "application/x-ndjson"},
    )
    assert response.status_code == 202
    job = client.get(f"/v1/batch-jobs/{response.json()['id']}", headers=AUTH).json()
    assert job["total"] == 3


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"history": ["a"]}\n{"history": ["b"], \n', "line 2: invalid JSON"),
        (
            '{"history": ["a"]}\n\n{"history": ["b"], "n": 9, "beam_width": 4}\n',
            "line 3: n (9) must be <= beam_width (4)",
        ),
        ('{"history": []}\n', "line 1: history is empty"),
        ('{"history": ["a"], "beam_width": 65}\n', "line 1: beam_width must be <= 64"),
        ('{"history": ["a"], "colour": "red"}\n', "line 1: colour: Extra inputs"),
        ("[1, 2]\n", "line 1: a recommend request must be a JSON object"),
        ("\n\n", "at least one request"),
    ],
)
def test_bad_uploads_name_the_line_and_enqueue_nothing(
    client: TestClient,
    settings: BatchSettings,
    redis_client: redis.Redis,
    text: str,
    message: str,
) -> None:
    answer = upload(client, text)
    assert answer["http"] == 400 and message in answer["error"]["message"], answer
    assert nothing_enqueued(redis_client, settings)


def test_bad_inline_rows_and_bodies(
    client: TestClient, settings: BatchSettings, redis_client: redis.Redis
) -> None:
    bad = {"requests": [GOOD, GOOD | {"n": 40}]}
    response = client.post("/v1/batch-jobs", json=bad, headers=AUTH)
    assert response.status_code == 400
    assert "requests[1]: n must be <= 32" in response.json()["error"]["message"]
    for body in (b"{nope", b'{"rows": []}', b'{"requests": []}'):
        response = client.post("/v1/batch-jobs", content=body, headers=AUTH)
        assert response.status_code == 400, body
    response = client.post("/v1/batch-jobs", content=b"x", headers=AUTH | {"Content-Type": "a/b"})
    assert response.status_code == 415
    assert nothing_enqueued(redis_client, settings)


def test_size_limits(
    client: TestClient, settings: BatchSettings, redis_client: redis.Redis
) -> None:
    big = "\n".join(json.dumps(GOOD | {"user_id": f"u{i:05d}"}) for i in range(120))
    answer = upload(client, big)
    assert answer["http"] == 413 and "over 4096 bytes" in answer["error"]["message"]
    many = {"requests": [{"history": ["a"]}] * 51}
    response = client.post("/v1/batch-jobs", json=many, headers=AUTH)
    assert response.status_code == 413 and "limit is 50" in response.text
    assert nothing_enqueued(redis_client, settings)


def test_unknown_jobs_are_404_and_the_api_key_is_required(client: TestClient) -> None:
    for job_id in ("0" * 32, "not-an-id"):
        for method, path in (
            ("GET", f"/v1/batch-jobs/{job_id}"),
            ("GET", f"/v1/batch-jobs/{job_id}/results"),
            ("DELETE", f"/v1/batch-jobs/{job_id}"),
        ):
            response = client.request(method, path, headers=AUTH)
            assert response.status_code == 404, (method, path)
            assert response.json()["error"]["code"] == "job_not_found"
    assert client.post("/v1/batch-jobs", json={"requests": [GOOD]}).status_code == 401
    assert client.get(f"/v1/batch-jobs/{'0' * 32}").status_code == 401


def test_results_wait_for_the_end_unless_partial(
    client: TestClient, settings: BatchSettings
) -> None:
    job_id = client.post("/v1/batch-jobs", json={"requests": [GOOD] * 3}, headers=AUTH).json()["id"]
    store_of(settings).write_row(job_id, 1, {"items": []}, is_error=False)
    response = client.get(f"/v1/batch-jobs/{job_id}/results", headers=AUTH)
    assert response.status_code == 409 and "?partial=true" in response.json()["error"]["message"]
    response = client.get(f"/v1/batch-jobs/{job_id}/results?partial=true", headers=AUTH)
    assert response.status_code == 200 and response.headers["x-batch-job-status"] == "queued"
    assert [json.loads(line)["row"] for line in response.text.splitlines()] == [1]


def test_cancel_a_queued_job(client: TestClient) -> None:
    job_id = client.post("/v1/batch-jobs", json={"requests": [GOOD] * 3}, headers=AUTH).json()["id"]
    response = client.delete(f"/v1/batch-jobs/{job_id}", headers=AUTH)
    assert response.status_code == 200 and response.json()["status"] == "cancelled"
    assert client.get(f"/v1/batch-jobs/{job_id}", headers=AUTH).json()["status"] == "cancelled"
    response = client.get(f"/v1/batch-jobs/{job_id}/results", headers=AUTH)
    assert response.status_code == 200 and response.text == ""


def test_redis_down_is_503(settings: BatchSettings) -> None:
    down = settings.model_copy(update={"redis_url": "redis://127.0.0.1:1/0"})
    with make_client(down) as c:
        response = c.get(f"/v1/batch-jobs/{'0' * 32}", headers=AUTH)
        assert response.status_code == 503 and response.headers["retry-after"] == "1"


def test_retry_failed_queues_the_failed_rows_chunks_once(
    client: TestClient, settings: BatchSettings, redis_client: redis.Redis
) -> None:
    job_id = client.post("/v1/batch-jobs", json={"requests": [GOOD] * 25}, headers=AUTH).json()[
        "id"
    ]
    redis_client.delete(settings.queue)  # as if a worker had taken its three chunks
    store = store_of(settings)
    for row in range(25):  # rows 3 and 21 (chunks 0 and 2) failed
        failed = row in (3, 21)
        store.write_row(job_id, row, {"error": {"code": "x"}} if failed else {"items": []}, failed)
    assert store.finish_if_complete(job_id) == "completed_with_errors"
    url = f"/v1/batch-jobs/{job_id}/retry-failed"
    first, second = client.post(url, headers=AUTH), client.post(url, headers=AUTH)
    assert first.status_code == second.status_code == 202
    assert (first.json()["requeued"], first.json()["status"], first.json()["done"]) == (
        2,
        "queued",
        23,
    )
    assert second.json()["requeued"] == 0 and second.json()["retries"] == 1
    assert redis_client.llen(settings.queue) == 2  # chunks 0 and 2, sent once


def test_retry_failed_of_a_cancelled_or_unknown_job(client: TestClient) -> None:
    job_id = client.post("/v1/batch-jobs", json={"requests": [GOOD]}, headers=AUTH).json()["id"]
    client.delete(f"/v1/batch-jobs/{job_id}", headers=AUTH)
    response = client.post(f"/v1/batch-jobs/{job_id}/retry-failed", headers=AUTH)
    assert response.status_code == 409 and response.json()["error"]["code"] == "job_cancelled"
    unknown = client.post(f"/v1/batch-jobs/{'0' * 32}/retry-failed", headers=AUTH)
    assert unknown.status_code == 404
