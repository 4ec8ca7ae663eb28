"""The real stack for the reliability suite: a decoder (tiny SID model, gRPC on a free port),
a gateway in front of it (uvicorn thread) with batch jobs on Redis, and a catalog service.

They get their own redis-server: other tests FLUSHALL the shared one between tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.reliability.support import CatalogApp, GatewayApp
from tests.services.catalog.formats import catalog_writers as cw
from tests.services.decoder.conftest import SidModel, sid_model  # noqa: F401 (fixture)
from tests.services.decoder.server.conftest import make_settings
from tests.services.gateway.support import gateway_settings
from tests.support.redis_server import RedisServer
from tests.support.served_redis import served_redis
from widebeam.services.catalog.service import CatalogSettings
from widebeam.services.decoder.server.background import BackgroundServer

# Small limits keep every generated request cheap on 2 CPU cores; they are settings, and the
# checks (4xx above them) are the same at any size.
GATEWAY_LIMITS = {"max_beam_width": 16, "max_n": 8, "max_tokens": 8, "max_history": 32}


@pytest.fixture(scope="session")
def rel_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    yield from served_redis(tmp_path_factory.mktemp("rel-redis"))


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of the test's own: fault tests kill and restart it."""
    yield from served_redis(tmp_path / "redis")


@pytest.fixture(scope="session")
def rel_decoder(sid_model: SidModel) -> Iterator[BackgroundServer]:  # noqa: F811
    with BackgroundServer(make_settings(sid_model)) as srv:
        yield srv


@pytest.fixture(scope="session")
def rel_gateway(rel_decoder: BackgroundServer, rel_redis: RedisServer) -> Iterator[GatewayApp]:
    settings = gateway_settings([rel_decoder.address], redis_url=rel_redis.url, **GATEWAY_LIMITS)
    with GatewayApp(settings) as gw:
        yield gw


@pytest.fixture(scope="session")
def rel_catalog(rel_redis: RedisServer) -> Iterator[CatalogApp]:
    """Catalog service with one published catalog `shop` (so reads can find something)."""
    settings = CatalogSettings(
        redis_url=rel_redis.url, namespace="rel", port=0, sid_layout=cw.LAYOUT.to_spec(),
        max_upload_bytes=32 << 20, max_inflated_bytes=256 << 20,
    )  # fmt: skip
    with CatalogApp(settings) as app:
        import httpx

        response = httpx.post(
            f"{app.url}/v1/catalogs/shop/versions", content=cw.jsonl(), timeout=30,
            headers={"Content-Type": "application/octet-stream"},
        )  # fmt: skip
        assert response.status_code == 201, response.text
        yield app
