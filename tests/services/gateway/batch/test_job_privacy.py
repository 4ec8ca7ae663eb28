"""Batch jobs are private to the API key that created them: a real gateway with two keys, where
one key's job does not exist for the other (404 on every route, no cancel), the job stores a
hash of its key and never the key, ids are 128-bit, and a worker's log never shows an id in
full. Without keys configured every job is visible, as before."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import redis

from tests.services.gateway.batch.conftest import Worker, batch_settings, wait_for
from tests.services.gateway.support import GatewayServer, bearer
from widebeam.services.decoder.server.background import BackgroundServer
from widebeam.services.gateway.batch.job_ids import JOB_ID, log_id
from widebeam.services.gateway.batch.settings import BatchSettings

KEYS = ("batch-Key-0wner-7c1d", "batch-Key-0ther-93ae")
ROWS = {"requests": [{"history": ["item-3", "item-7"], "n": 2}] * 5}
BAD_ROW = {"history": ["no-such-item"], "n": 2}


def every_route(http: httpx.Client, job_id: str, key: str) -> dict[str, httpx.Response]:
    base = f"/v1/batch-jobs/{job_id}"
    return {
        "status": http.get(base, headers=bearer(key)),
        "results": http.get(f"{base}/results?partial=true", headers=bearer(key)),
        "retry": http.post(f"{base}/retry-failed", headers=bearer(key)),
        "cancel": http.delete(base, headers=bearer(key)),
    }


def test_another_keys_job_does_not_exist(
    start_gateway: Callable[..., GatewayServer], redis_client: redis.Redis
) -> None:
    server = start_gateway(api_keys=",".join(KEYS))
    with httpx.Client(base_url=server.url, timeout=30) as http:
        submitted = http.post("/v1/batch-jobs", json=ROWS, headers=bearer(KEYS[0]))
        assert submitted.status_code == 202, submitted.text
        job_id = submitted.json()["id"]
        unknown = every_route(http, "0" * 32, KEYS[1])
        others = every_route(http, job_id, KEYS[1])
        for route, answer in others.items():
            # Just as for an id that does not exist: nothing tells the job is there.
            assert answer.status_code == 404, (route, answer.text)
            expected = unknown[route].json()["error"]
            got = answer.json()["error"]
            assert got["code"] == expected["code"] == "job_not_found"
            assert got["message"] == expected["message"].replace("0" * 32, job_id)
        own = every_route(http, job_id, KEYS[0])
        # The other key's DELETE did not cancel it: the owner's status read still saw it queued.
        assert own["status"].status_code == 200 and own["status"].json()["status"] == "queued"
        assert own["results"].status_code == 200
        assert own["retry"].status_code == 202 and own["retry"].json()["requeued"] == 0
        assert own["cancel"].json()["status"] == "cancelled"
    stored = redis_client.hget(f"{BatchSettings().namespace}:job:{job_id}", "owner")
    assert stored is not None and len(stored) == 64 and stored.decode() != KEYS[0]
    for key in redis_client.scan_iter():  # the key itself is nowhere in Redis
        assert all(k.encode() not in dump(redis_client, key) for k in KEYS), key


def dump(client: redis.Redis, key: bytes) -> bytes:
    kind = client.type(key)
    if kind == b"hash":
        return b"".join(a + b for a, b in client.hgetall(key).items())
    if kind == b"zset":
        return b"".join(m for m, _ in client.zrange(key, 0, -1, withscores=True))
    if kind == b"list":
        return b"".join(client.lrange(key, 0, -1))
    if kind == b"set":
        return b"".join(client.smembers(key))
    return bytes(client.get(key) or b"")


def test_without_api_keys_every_job_is_visible(start_gateway: Callable[..., GatewayServer]) -> None:
    server = start_gateway()
    with httpx.Client(base_url=server.url, timeout=30) as http:
        job_id = http.post("/v1/batch-jobs", json=ROWS, headers=bearer(KEYS[0])).json()["id"]
        for headers in ({}, bearer(KEYS[1])):
            assert http.get(f"/v1/batch-jobs/{job_id}", headers=headers).status_code == 200


def test_ids_are_128_random_bits_and_a_worker_logs_them_short(
    start_gateway: Callable[..., GatewayServer],
    redis_url: str,
    decoder: BackgroundServer,
    start_worker: Callable[[BatchSettings], Worker],
) -> None:
    server = start_gateway(api_keys=KEYS[0])
    worker = start_worker(batch_settings(redis_url, decoder.address))
    with httpx.Client(base_url=server.url, timeout=30, headers=bearer(KEYS[0])) as http:
        ids = [http.post("/v1/batch-jobs", json=ROWS).json()["id"] for _ in range(20)]
        # A job with a row error too: error rows take other log paths.
        body = {"requests": [*ROWS["requests"], BAD_ROW]}
        ids.append(http.post("/v1/batch-jobs", json=body).json()["id"])

        def all_ended() -> bool:
            statuses = [http.get(f"/v1/batch-jobs/{i}").json()["status"] for i in ids]
            return all(s not in ("queued", "running") for s in statuses)

        wait_for(all_ended, 120, "the jobs to end", step=0.1)
        last = http.get(f"/v1/batch-jobs/{ids[-1]}").json()
    assert all(JOB_ID.match(i) for i in ids) and len(set(ids)) == len(ids)
    assert (last["status"], last["failed"]) == ("completed_with_errors", 1)
    log = worker.log_path.read_text(errors="replace")
    assert "succeeded in" in log  # Celery logged the runs, at INFO
    for job_id in ids:
        assert job_id not in log, f"job id {log_id(job_id)}… logged in full"
        assert log_id(job_id) in log
