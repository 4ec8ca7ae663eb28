"""Bearer API keys on every /v1 route (not on health, metrics, docs) and the body size limit."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.services.gateway.conftest import HISTORY
from tests.services.gateway.support import GatewayServer, bearer, gateway_settings
from widebeam.services.decoder.server.background import BackgroundServer

KEYS = ["key-one-8f2c", "key-two-77ab"]
LIMIT = 4096


@pytest.fixture(scope="module")
def locked(decoder_server: BackgroundServer) -> Iterator[GatewayServer]:
    settings = gateway_settings(
        [decoder_server.address], api_keys=",".join(KEYS), max_body_bytes=LIMIT
    )
    with GatewayServer(settings) as gw:
        yield gw


@pytest.fixture
def http(locked: GatewayServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=locked.url, timeout=30) as client:
        yield client


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/v1/models"), ("POST", "/v1/recommend"), ("POST", "/v1/completions"),
     ("POST", "/v1/chat/completions"), ("GET", "/v1/models/model")],
)  # fmt: skip
@pytest.mark.parametrize("headers", [{}, bearer("wrong-key-123"), {"Authorization": KEYS[0]}])
def test_v1_routes_need_a_valid_key(
    http: httpx.Client, method: str, path: str, headers: dict[str, str]
) -> None:
    response = http.request(method, path, headers=headers, json={"history": HISTORY})
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    error = response.json()["error"]
    assert error["type"] == "authentication_error" and error["code"] == "invalid_api_key"
    assert "wrong-key-123" not in response.text and KEYS[0] not in response.text


def test_each_configured_key_works(http: httpx.Client) -> None:
    for key in KEYS:
        response = http.post(
            "/v1/recommend", json={"history": HISTORY, "n": 2}, headers=bearer(key)
        )
        assert response.status_code == 200, response.text


def test_open_routes(http: httpx.Client) -> None:
    for path in ("/healthz", "/readyz", "/metrics", "/docs", "/openapi.json"):
        assert http.get(path).status_code == 200, path


def test_openai_client_with_and_without_the_key(locked: GatewayServer) -> None:
    base = f"{locked.url}/v1"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=base, api_key="nope", max_retries=0).models.list()
    ok = openai.OpenAI(base_url=base, api_key=KEYS[1], max_retries=0)
    assert ok.models.list().data[0].id == "model"


def test_body_over_the_limit_is_413(http: httpx.Client) -> None:
    big = {"history": HISTORY, "user_id": "u" * 200, "exclude": ["item-1"] * 600}
    response = http.post("/v1/recommend", json=big, headers=bearer(KEYS[0]))
    assert response.status_code == 413
    error = response.json()["error"]
    assert error["code"] == "request_too_large" and str(LIMIT) in error["message"]


def test_chunked_body_over_the_limit_is_413(http: httpx.Client) -> None:
    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit must count the stream
        yield b'{"history": ["item-3"], "exclude": ['
        for _ in range(1000):
            yield b'"item-1",'
        yield b'"item-2"]}'

    response = http.post(
        "/v1/recommend",
        content=chunks(),
        headers=bearer(KEYS[0]) | {"content-type": "application/json"},
    )
    assert response.status_code == 413


def test_body_under_the_limit_passes(http: httpx.Client) -> None:
    body = {"history": HISTORY, "n": 2, "exclude": ["item-1"] * 100}
    response = http.post("/v1/recommend", json=body, headers=bearer(KEYS[0]))
    assert response.status_code == 200, response.text
