"""Security: API keys on every write route and batch job, key-free logs and error messages of
real processes, request body and upload size limits (413)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.reliability.support import (
    CatalogApp,
    GatewayApp,
    SecureRedis,
    listening_url,
    process,
    wait_http,
)
from tests.services.catalog.formats import catalog_writers as cw
from tests.services.decoder.conftest import SidModel
from tests.services.gateway.support import gateway_settings
from tests.support.redis_server import RedisServer
from widebeam.services.catalog.service import CatalogSettings
from widebeam.services.decoder.server.background import BackgroundServer

KEYS = ["gw-Key-0ne-4a7f1c", "gw-Key-Tw0-9b3e22"]
CATALOG_KEY = "cat-Key-Wr1te-55d0e1"
WRONG = "gw-Key-0ne-4a7f1X"  # one character off a real key
BODY_LIMIT = 8192
JOB_ID = "0" * 32


def _fill(path: str) -> str:
    return re.sub(r"\{[^}]+\}", lambda m: JOB_ID if "job" in m.group() else "x", path)


def _operations(base_url: str, prefix: str) -> list[tuple[str, str]]:
    spec = httpx.get(f"{base_url}/openapi.json").json()
    return [
        (method.upper(), _fill(path))
        for path, methods in spec["paths"].items()
        if path.startswith(prefix)
        for method in methods
    ]


@pytest.fixture(scope="module")
def locked_gateway(rel_decoder: BackgroundServer, rel_redis: RedisServer) -> Iterator[GatewayApp]:
    settings = gateway_settings(
        [rel_decoder.address], redis_url=rel_redis.url, api_keys=",".join(KEYS),
        max_body_bytes=BODY_LIMIT,
    )  # fmt: skip
    with GatewayApp(settings) as gateway:
        yield gateway


def test_every_v1_route_needs_a_key(locked_gateway: GatewayApp) -> None:
    operations = _operations(locked_gateway.url, "/v1")
    assert ("POST", "/v1/batch-jobs") in operations and len(operations) >= 8
    auth_headers = [
        {},
        {"Authorization": f"Bearer {WRONG}"},
        {"Authorization": KEYS[0]},  # no scheme
        {"Authorization": f"Basic {KEYS[0]}"},
        {"Authorization": f"Bearer {KEYS[0]}x"},  # a real key is a prefix
        {"Authorization": "Bearer"},
    ]
    with httpx.Client(base_url=locked_gateway.url, timeout=30) as http:
        for method, path in operations:
            for headers in auth_headers:
                response = http.request(method, path, headers=headers, json={"requests": []})
                assert response.status_code == 401, (method, path, headers, response.text)
                assert response.headers["WWW-Authenticate"].startswith("Bearer")
                assert all(k not in response.text for k in (*KEYS, WRONG))
        ok = {"Authorization": f"Bearer {KEYS[1]}"}
        rows = {"requests": [{"history": ["item-3"], "n": 2}]}
        assert http.post("/v1/batch-jobs", json=rows, headers=ok).status_code == 202
        job = http.post("/v1/recommend", json={"history": ["item-3"], "n": 2}, headers=ok)
        assert job.status_code == 200, job.text
        for path in ("/healthz", "/metrics", "/openapi.json", "/docs"):
            assert http.get(path).status_code == 200, path


def test_body_limits(locked_gateway: GatewayApp) -> None:
    ok = {"Authorization": f"Bearer {KEYS[0]}", "Content-Type": "application/json"}
    big = b'{"history": ["item-3"], "user_id": "' + b"u" * BODY_LIMIT + b'"}'

    def chunked() -> Iterator[bytes]:  # no Content-Length
        for i in range(0, len(big), 1000):
            yield big[i : i + 1000]

    with httpx.Client(base_url=locked_gateway.url, timeout=30) as http:
        for path in ("/v1/recommend", "/v1/completions", "/v1/batch-jobs"):
            for content in (big, chunked()):
                response = http.post(path, content=content, headers=ok)
                assert response.status_code == 413, (path, response.text)
                assert response.json()["error"]["code"] == "request_too_large"


def test_catalog_writes_need_a_key(rel_redis: RedisServer) -> None:
    settings = CatalogSettings(
        redis_url=rel_redis.url, namespace="auth", port=0, api_key=CATALOG_KEY,
        sid_layout=cw.LAYOUT.to_spec(), max_upload_bytes=4096,
    )  # fmt: skip
    with CatalogApp(settings) as catalog, httpx.Client(base_url=catalog.url, timeout=30) as http:
        writes = [op for op in _operations(catalog.url, "/v1") if op[0] != "GET"]
        assert len(writes) == 2, writes
        for method, path in writes:
            for headers in ({}, {"Authorization": f"Bearer {CATALOG_KEY[:-1]}X"}):
                response = http.request(method, path, headers=headers, content=cw.jsonl())
                assert response.status_code == 401, (method, path, response.text)
                assert CATALOG_KEY not in response.text
        ok = {"Authorization": f"Bearer {CATALOG_KEY}"}
        assert (
            http.post("/v1/catalogs/c/versions", content=cw.jsonl(), headers=ok).status_code == 201
        )
        too_big = http.post("/v1/catalogs/c/versions", content=b"x" * 5000, headers=ok)
        assert too_big.status_code == 413
        assert http.get("/v1/catalogs/c").json()["current_version"] == 1  # reads are open


def _hammer(url: str, keys: list[str], routes: list[tuple[str, str, object]]) -> None:
    """Successes and failures, so every auth code path logs what it logs."""
    with httpx.Client(base_url=url, timeout=60) as http:
        for key in [*keys, WRONG, ""]:
            for method, path, body in routes:
                headers = {"Authorization": f"Bearer {key}"} if key else {}
                if isinstance(body, bytes):
                    http.request(method, path, content=body, headers=headers)
                else:
                    http.request(method, path, json=body, headers=headers)


def test_keys_and_passwords_never_reach_the_logs(
    sid_model: SidModel, rel_decoder: BackgroundServer, tmp_path: Path
) -> None:
    password = "L0g-Leak-Canary-pw"
    secrets = [*KEYS, WRONG, CATALOG_KEY, password]
    with SecureRedis(tmp_path / "redis", password, tls=False) as redis_server:
        url = redis_server.url
        gateway_env = {"WIDEBEAM_GATEWAY_API_KEYS": ",".join(KEYS),
                       "WIDEBEAM_GATEWAY_REDIS_URL": url}  # fmt: skip
        gateway_log = tmp_path / "gateway.log"
        args = ["gateway", "serve", "--port", "0", "--decoder", rel_decoder.address,
                "--log-level", "DEBUG"]  # fmt: skip
        with process(args, gateway_env, gateway_log, "gateway listening on"):
            gw = listening_url(gateway_log, "gateway listening on")
            wait_http(f"{gw}/healthz")
            _hammer(gw, KEYS, [
                ("POST", "/v1/recommend", {"history": ["item-3"], "n": 2}),
                ("POST", "/v1/batch-jobs", {"requests": [{"history": ["item-3"]}]}),
                ("GET", "/v1/models", None),
                ("POST", "/v1/recommend", {"history": ["nope"], "bogus": 1}),
            ])  # fmt: skip
        catalog_env = {"WIDEBEAM_CATALOG_API_KEY": CATALOG_KEY,
                       "WIDEBEAM_CATALOG_REDIS_URL": url,
                       "WIDEBEAM_CATALOG_SID_LAYOUT": cw.LAYOUT.to_spec()}  # fmt: skip
        catalog_log = tmp_path / "catalog.log"
        args = ["catalog", "serve", "--port", "0", "--log-level", "DEBUG"]
        with process(args, catalog_env, catalog_log, "catalog service listening on"):
            cat = listening_url(catalog_log, "catalog service listening on")
            wait_http(f"{cat}/healthz")
            _hammer(cat, [CATALOG_KEY], [
                ("POST", "/v1/catalogs/shop/versions", cw.jsonl()),
                ("POST", "/v1/catalogs/shop/versions", b"junk"),
                ("POST", "/v1/catalogs/shop/activate", {"version": 1}),
            ])  # fmt: skip
        decoder_log = tmp_path / "decoder.log"
        args = ["decoder", "serve", "--model", str(sid_model.model_dir), "--port", "0",
                "--redis-url", url, "--log-level", "DEBUG"]  # fmt: skip
        with process(args, {}, decoder_log, "decoder serving on"):
            pass
    for log in (gateway_log, catalog_log, decoder_log):
        text = log.read_text(errors="replace")
        assert len(text) > 100, f"{log.name} captured nothing"
        leaked = [s for s in secrets if s in text]
        assert not leaked, f"{log.name} contains {leaked}"
