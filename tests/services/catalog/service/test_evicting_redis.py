"""The catalog service on a Redis that may evict keys: it refuses to start, and a policy
changed under a running service makes uploads 503 `redis_evicting` with nothing written
(a real redis-server of the test's own, the real app over HTTP and `widebeam catalog serve`)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.services.catalog.formats import catalog_writers as cw
from tests.services.catalog.service.conftest import LAYOUT_SPEC, StartService
from tests.support.redis_server import RedisServer, find_redis_server

pytestmark = pytest.mark.skipif(find_redis_server() is None, reason="needs redis-server")


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    """This module's own redis-server (its policy changes): `start_service` serves over it."""
    with RedisServer(tmp_path / "redis") as server:
        yield server.url


def test_upload_on_an_evicting_redis_is_503_and_publishes_nothing(
    start_service: StartService, redis_url: str
) -> None:
    service = start_service(sid_layout=LAYOUT_SPEC)
    assert service.upload("other", cw.jsonl()).status_code == 201
    with redis.Redis.from_url(redis_url) as client:
        keys_before = client.dbsize()
        client.config_set("maxmemory-policy", "allkeys-lru")
        refused = service.upload("shop", cw.jsonl())
        assert client.dbsize() == keys_before
    assert refused.status_code == 503, refused.text
    error = refused.json()["error"]
    assert error["code"] == "redis_evicting" and "Retry-After" not in refused.headers
    assert "'allkeys-lru'" in error["message"] and "noeviction" in error["message"]
    assert service.current("shop") is None and service.current("other") == 1


def test_serve_refuses_to_start_on_an_evicting_redis(redis_url: str) -> None:
    with redis.Redis.from_url(redis_url) as client:
        client.config_set("maxmemory-policy", "volatile-lru")
    command = [sys.executable, "-m", "widebeam", "catalog", "serve", "--port", "0",
               "--redis-url", redis_url, "--sid-layout", LAYOUT_SPEC]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert "refusing to start" in output and "'volatile-lru'" in output, output
