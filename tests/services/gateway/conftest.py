"""Gateway fixtures: a real decoder (tiny SID model, in-process gRPC on a free port) and a real
gateway over HTTP in front of it. Tests that stop decoders start their own."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.services.decoder.conftest import SidModel, sid_model  # noqa: F401 (fixture)
from tests.services.decoder.server.conftest import make_settings
from tests.services.gateway.support import GatewayServer, gateway_settings
from widebeam.services.decoder.server.background import BackgroundServer

HISTORY = ["item-3", "item-17", "item-42"]


@pytest.fixture(scope="session")
def decoder_server(sid_model: SidModel) -> Iterator[BackgroundServer]:  # noqa: F811
    with BackgroundServer(make_settings(sid_model)) as srv:
        yield srv


@pytest.fixture(scope="session")
def gateway(decoder_server: BackgroundServer) -> Iterator[GatewayServer]:
    with GatewayServer(gateway_settings([decoder_server.address], max_beam_width=48)) as gw:
        yield gw


@pytest.fixture
def client(gateway: GatewayServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gateway.url, timeout=60) as http:
        yield http


@pytest.fixture(scope="session")
def catalog_of(sid_model: SidModel) -> dict[str, tuple[int, ...]]:  # noqa: F811
    return dict(sid_model.catalog)
