"""API key on writes (never logged), health/readiness, metrics, Redis outages."""

from __future__ import annotations

import logging

import pytest

from tests.services.catalog.formats import catalog_writers as cw
from tests.services.catalog.service.conftest import LAYOUT_SPEC, Service, StartService
from tests.support.redis_server import RedisServer

KEY = "k3y-Th4t-Must-N0t-Leak"


def test_writes_need_the_key_reads_do_not(
    start_service: StartService, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    service = start_service(sid_layout=LAYOUT_SPEC, api_key=KEY)
    for key in (None, "wrong", KEY + "x", KEY[:-1]):
        for multipart in (False, True):
            response = service.upload("shop", cw.jsonl(), key=key, multipart=multipart)
            assert response.status_code == 401, key
            assert response.headers["WWW-Authenticate"].startswith("Bearer")
            assert KEY not in response.text
    basic = service.http.post("/v1/catalogs/shop/versions", auth=("user", KEY), content=b"x")
    assert basic.status_code == 401
    assert service.http.get("/v1/catalogs/shop").status_code == 404  # nothing published
    assert service.upload("shop", cw.jsonl(), key=KEY).status_code == 201
    assert service.upload("shop", cw.csv_bytes(), key=KEY, multipart=True).status_code == 201
    activate = "/v1/catalogs/shop/activate"
    assert service.http.post(activate, json={"version": 1}).status_code == 401
    headers = {"Authorization": f"Bearer {KEY}"}
    assert service.http.post(activate, json={"version": 1}, headers=headers).status_code == 200
    # Reads are open.
    assert service.http.get("/v1/catalogs/shop/items/12").status_code == 200
    assert service.http.get("/v1/catalogs").status_code == 200
    assert "published version" in caplog.text and "401" in caplog.text  # logs were captured
    assert KEY not in caplog.text
    assert KEY not in repr(service.settings) and KEY not in str(service.settings.model_dump())


def test_health_ready_and_metrics(service: Service) -> None:
    assert service.http.get("/healthz").json() == {"status": "ok"}
    assert service.http.get("/readyz").json() == {"status": "ready"}
    assert service.upload("shop", cw.jsonl()).status_code == 201
    assert service.upload("shop", b'{"item_id": "a", "sid": [99, 0, 0]}').status_code == 422
    assert service.upload("shop", cw.jsonl(), format="nope").status_code == 400
    response = service.http.get("/metrics")
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    for line in [
        'widebeam_catalog_uploads_total{outcome="published"} 1.0',
        'widebeam_catalog_uploads_total{outcome="invalid"} 1.0',
        'widebeam_catalog_uploads_total{outcome="bad_request"} 1.0',
        'widebeam_catalog_current_version{catalog="shop"} 1.0',
        "widebeam_catalog_redis_up 1.0",
        "widebeam_catalog_build_seconds_count 2.0",
        "widebeam_catalog_publish_seconds_count 1.0",
    ]:
        assert line in text, line
    assert "widebeam_catalog_upload_bytes_total" in text
    service.http.post("/v1/catalogs/shop/activate", json={"version": 1})
    service.upload("shop", cw.jsonl())
    text = service.http.get("/metrics").text
    assert 'widebeam_catalog_current_version{catalog="shop"} 2.0' in text


def test_redis_down_is_503_with_retry_after(service: Service, redis_server: RedisServer) -> None:
    assert service.upload("shop", cw.jsonl()).status_code == 201
    redis_server.stop()
    try:
        for method, path in [
            ("GET", "/v1/catalogs"),
            ("GET", "/v1/catalogs/shop"),
            ("GET", "/v1/catalogs/shop/items/12"),
            ("GET", "/readyz"),
        ]:
            response = service.http.request(method, path)
            assert response.status_code == 503, (path, response.text)
            assert response.headers["Retry-After"].isdigit()
            assert response.json()["error"]["code"] == "redis_unavailable"
        upload = service.upload("shop", cw.jsonl())
        assert upload.status_code == 503 and upload.headers["Retry-After"]
        assert service.http.get("/healthz").status_code == 200  # the process is still up
        text = service.http.get("/metrics").text
        assert "widebeam_catalog_redis_up 0.0" in text
        assert 'widebeam_catalog_uploads_total{outcome="unavailable"} 1.0' in text
    finally:
        redis_server.start()
    assert service.http.get("/readyz").status_code == 200  # reconnects by itself
