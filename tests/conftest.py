"""Project-wide fixtures (a real redis-server for the tests that need one) and the `gpu` marker.

`redis` is imported inside the fixtures: GPU machines that run only the `gpu` tests lack it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.redis_server import RedisServer
from tests.support.served_redis import served_redis

try:  # property tests: CI replays a fixed set of examples so a run is reproducible
    from hypothesis import settings as _hypothesis_settings

    _hypothesis_settings.register_profile("ci", derandomize=True, database=None)
    if os.environ.get("CI"):
        _hypothesis_settings.load_profile("ci")
except ImportError:  # hypothesis is a dev dependency; GPU machines may lack it
    pass


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One redis-server for the session (``.url``, ``.port``, ``.restart()``); lazily started."""
    yield from served_redis(tmp_path_factory.mktemp("redis"))


@pytest.fixture
def redis_url(redis_server: RedisServer) -> Iterator[str]:
    """URL of an empty Redis (FLUSHALL before each test; restarted if a test stopped it)."""
    if not redis_server.running:
        redis_server.start()
    import redis

    with redis.Redis.from_url(redis_server.url) as client:
        client.flushall()
    yield redis_server.url


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[Any]:
    """bytes-returning client (`redis.Redis`) of the empty test Redis."""
    import redis

    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def pytest_configure(config: pytest.Config) -> None:
    """A pytest-xdist worker (`make test` runs two) uses one torch thread: two workers on two
    cores with two threads each would make every small op wait for a descheduled thread. The
    processes tests start keep their own defaults (a test may check what a launcher sets)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        torch.set_num_threads(1)
    _share_default_ssl_context()


def _share_default_ssl_context() -> None:
    """Every `httpx.Client` (each `TestClient`, each `httpx.get(...)`) builds a new default
    SSLContext, parsing the whole CA bundle: 20-25 ms of CPU on a quiet core, hundreds of times
    a run, for plain-HTTP calls to local test servers. The tests' processes build it once per
    CA location and hand the same (real, read-only once built) context to every client that asks
    for the default one; explicit `verify=` or `cert=` arguments still go to httpx as given. The
    processes the tests start (services, CLIs) are untouched."""
    try:
        import httpx._transports.default as transports
    except ImportError:  # httpx is a dev dependency; GPU machines may lack it
        return
    from httpx._config import create_ssl_context

    built: dict[tuple[bool, str | None, str | None], Any] = {}

    def shared(verify: Any = True, cert: Any = None, trust_env: bool = True) -> Any:
        if verify is not True or cert is not None:
            return create_ssl_context(verify=verify, cert=cert, trust_env=trust_env)
        # Keyed on what picks the bundle, so a test that changes the environment gets its own.
        key = (trust_env, os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
        if key not in built:
            built[key] = create_ssl_context(verify=True, trust_env=trust_env)
        return built[key]

    transports.create_ssl_context = shared  # type: ignore[assignment]


# Folders of long modules (whole stacks started, models trained, fault scenarios), collected
# first: `make test`'s two workers take modules in collection order, and a long module taken
# last keeps one worker busy while the other has nothing left.
LONG_FIRST = ("tests/widebeam/launcher/", "tests/widebeam/demo/", "tests/reliability/")


def _long_first(item: pytest.Item) -> int:
    path = Path(str(item.path)).as_posix()
    return 0 if any(f"/{folder}" in path for folder in LONG_FIRST) else 1


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Long folders first (stable otherwise); `gpu` tests run only where CUDA is available:
    elsewhere they are skipped, not failed."""
    items.sort(key=_long_first)
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
