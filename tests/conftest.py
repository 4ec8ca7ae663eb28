"""Project-wide fixtures (a real redis-server for the tests that need one) and the `gpu` marker.

`redis` is imported inside the fixtures: GPU machines that run only the `gpu` tests lack it."""

from __future__ import annotations

import os
from collections.abc import Iterator
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


# The longest modules, longest first (seconds of one worker of `make test` on two busy cores,
# 2026-12-03). `make test` passes --no-loadscope-reorder, so its two workers take modules in
# collection order: long ones first and the many short ones last, the two workers end within
# seconds of each other. (xdist's default order, by test count, puts the one-test modules last:
# a long one then keeps one worker busy while the other has nothing left.) A module missing
# here only runs later; tests/test_conftest_order.py checks that every one listed exists.
LONG_MODULES = (
    "tests/reliability/test_bad_input_schemathesis.py",  # 74 s
    "tests/widebeam/demo/test_pipeline.py",  # 59 s
    "tests/bench/test_stack_smoke.py",  # 51 s
    "tests/reliability/test_faults_batch.py",  # 51 s
    "tests/services/catalog/store/test_load_process.py",  # 47 s
    "tests/kernels/attention/test_triton_cascade.py",  # 47 s
    "tests/widebeam/launcher/test_up.py",  # 46 s
    "tests/reliability/test_faults_catalog.py",  # 46 s
    "tests/services/decoder/server/test_catalog_file_matches_redis.py",  # 46 s
    "tests/deploy/test_wheel.py",  # 43 s
    "tests/reliability/test_faults_restart.py",  # 42 s
    "tests/widebeam/launcher/test_up_persistence.py",  # 39 s
    "tests/bench/test_fp8_gemm_smoke.py",  # 38 s
    "tests/services/decoder/server/test_catalog_follow.py",  # 34 s
    "tests/services/gateway/batch/test_worker_e2e.py",  # 31 s
    "tests/bench/test_gateway_gc_smoke.py",  # 30 s
    "tests/services/decoder/test_cli_generate.py",  # 29 s
    "tests/reliability/test_faults_batch_decoder_outage.py",  # 27 s
    "tests/reliability/test_bad_input_properties.py",  # 27 s
    "tests/reliability/test_security_redis.py",  # 23 s
    "tests/widebeam/demo/test_make_demo.py",  # 23 s
    "tests/reliability/test_security_auth.py",  # 23 s
    "tests/services/catalog/service/test_upload.py",  # 21 s
    "tests/services/http/test_connection_guard.py",  # 21 s
    "tests/widebeam/eval/test_eval_demo.py",  # 21 s
    "tests/services/decoder/test_warm_up.py",  # 20 s
    "tests/reliability/test_faults_decoder_kill.py",  # 19 s
    "tests/reliability/test_faults_batch_lost_worker.py",  # 18 s
    "tests/services/gateway/test_least_loaded.py",  # 17 s
    "tests/kernels/layers/test_fused_norm_rope.py",  # 17 s
    "tests/widebeam/launcher/test_up_gateway_options.py",  # 17 s
    "tests/bench/test_recif_smoke.py",  # 16 s
    "tests/reliability/test_faults_batch_oom.py",  # 16 s
    "tests/reliability/test_huge_prompts.py",  # 15 s
    "tests/widebeam/test_stack_e2e.py",  # 15 s
    "tests/bench/test_kernels_smoke.py",  # 14 s
)
_RANK = {module: rank for rank, module in enumerate(LONG_MODULES)}


def _long_first(item: pytest.Item) -> int:
    return _RANK.get(item.nodeid.split("::", 1)[0], len(LONG_MODULES))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The long modules first (stable otherwise); `gpu` tests run only where CUDA is
    available: elsewhere they are skipped, not failed."""
    items.sort(key=_long_first)
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
