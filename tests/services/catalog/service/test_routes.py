"""Read routes, activation (rollback / roll-forward) and item / SID lookups."""

from __future__ import annotations

from tests.services.catalog.formats import catalog_writers as cw
from tests.services.catalog.service.conftest import LAYOUT_SPEC, Service, StartService

V2 = b'{"item_id": "new", "sid": [1, 1, 1]}\n{"item_id": "12", "sid": [2, 2, 2]}\n'


def _publish_two(service: Service) -> None:
    assert service.upload("shop", cw.jsonl()).status_code == 201
    assert service.upload("shop", V2).status_code == 201


def test_list_and_describe(service: Service) -> None:
    assert service.http.get("/v1/catalogs").json() == {"catalogs": []}
    _publish_two(service)
    assert service.upload("other", cw.jsonl(), activate=False).status_code == 201
    assert service.http.get("/v1/catalogs").json() == {
        "catalogs": [
            {"name": "other", "current_version": None},
            {"name": "shop", "current_version": 2},
        ]
    }
    info = service.http.get("/v1/catalogs/shop").json()
    assert info["current_version"] == 2 and info["versions"] == [1, 2]
    assert info["current"]["version"] == 2 and info["current"]["current"] is True
    assert info["current"]["stats"]["num_items"] == 2
    assert info["current"]["layout"]["codebook_sizes"] == [cw.C] * 3
    v1 = service.http.get("/v1/catalogs/shop/versions/1").json()
    assert v1["current"] is False and v1["stats"]["num_items"] == len(cw.ROWS)
    assert v1["artifact"]["chunk_count"] >= 1 and "chunk_sha256" not in v1["artifact"]


def test_activate_rollback_and_roll_forward(service: Service) -> None:
    _publish_two(service)
    hashes = {
        v: service.http.get(f"/v1/catalogs/shop/versions/{v}").json()["content_hash"]
        for v in (1, 2)
    }
    response = service.http.post("/v1/catalogs/shop/activate", json={"version": 1})
    assert response.status_code == 200
    assert response.json() == {"name": "shop", "version": 1, "previous_version": 2}
    info = service.http.get("/v1/catalogs/shop").json()
    assert info["current_version"] == 1 and info["current"]["content_hash"] == hashes[1]
    assert service.http.get("/v1/catalogs/shop/items/sku-7").json()["version"] == 1
    forward = service.http.post("/v1/catalogs/shop/activate", json={"version": 2})
    assert forward.json()["previous_version"] == 1 and service.current("shop") == 2
    missing = service.http.post("/v1/catalogs/shop/activate", json={"version": 9})
    assert missing.status_code == 404 and "retained: [1, 2]" in missing.json()["error"]["message"]
    assert service.current("shop") == 2
    bad = service.http.post("/v1/catalogs/shop/activate", json={"version": "x"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_request"
    unknown = service.http.post("/v1/catalogs/nope/activate", json={"version": 1})
    assert unknown.status_code == 404


def test_item_and_sid_lookups(service: Service) -> None:
    _publish_two(service)
    item = service.http.get("/v1/catalogs/shop/items/12").json()
    assert item == {"name": "shop", "version": 2, "item_id": "12", "sid": [2, 2, 2]}
    old = service.http.get("/v1/catalogs/shop/items/12", params={"version": 1}).json()
    assert old["sid"] == [15, 0, 7] and old["version"] == 1
    sid = service.http.get("/v1/catalogs/shop/sids/15,0,7", params={"version": 1}).json()
    assert sid["item_ids"] == ["12", "11", "13"]  # most popular first
    assert service.http.get("/v1/catalogs/shop/sids/1, 1, 1").json()["item_ids"] == ["new"]
    for path, status in [
        ("/v1/catalogs/shop/items/sku-7", 404),  # not in the current version
        ("/v1/catalogs/shop/sids/15,0,7", 404),
        ("/v1/catalogs/shop/sids/1,x,3", 400),
        ("/v1/catalogs/shop/items/12?version=7", 404),
        ("/v1/catalogs/shop/items/12?version=zero", 400),
    ]:
        response = service.http.get(path)
        assert response.status_code == status, (path, response.text)
        assert response.json()["error"]["message"]


def test_unknown_catalog_and_version_are_404(service: Service) -> None:
    for path in [
        "/v1/catalogs/nope",
        "/v1/catalogs/nope/versions/1",
        "/v1/catalogs/nope/items/a",
        "/v1/catalogs/nope/sids/1,2,3",
        "/v1/nothing-here",
    ]:
        response = service.http.get(path)
        assert response.status_code == 404, path
        assert response.json()["error"]["code"] == "not_found"
    assert "'nope'" in service.http.get("/v1/catalogs/nope").json()["error"]["message"]
    assert service.upload("shop", cw.jsonl()).status_code == 201
    response = service.http.get("/v1/catalogs/shop/versions/5")
    assert response.status_code == 404 and "version 5" in response.json()["error"]["message"]
    assert service.http.get("/v1/catalogs/bad:name").status_code == 400


def test_openapi_documents_the_api(service: Service) -> None:
    spec = service.http.get("/openapi.json").json()
    upload = spec["paths"]["/v1/catalogs/{name}/versions"]["post"]
    assert "multipart/form-data" in upload["requestBody"]["content"]
    assert {"201", "400", "401", "413", "422", "503"} <= set(upload["responses"])
    assert "UploadResult" in spec["components"]["schemas"]
    assert service.http.get("/docs").status_code == 200


def test_errors_have_the_gateways_body(start_service: StartService) -> None:
    """Every error is `{"error": {"message", "type", "code", "param"}}`, as the gateway's:
    the same type per status, the field named where there is one."""
    service = start_service(sid_layout=LAYOUT_SPEC, api_key="k3y")
    assert service.upload("shop", cw.jsonl(), key="k3y").status_code == 201
    cases = [
        ("GET", "/v1/catalogs/nope", 404, "not_found_error", "not_found", None),
        ("GET", "/v1/catalogs/bad:name", 400, "invalid_request_error", "invalid_name", "name"),
        ("GET", "/v1/catalogs/shop/sids/1,x", 400, "invalid_request_error", "invalid_request",
         "codes"),
        ("GET", "/v1/catalogs/shop/items/12?version=0", 400, "invalid_request_error",
         "invalid_request", "query.version"),
        ("POST", "/v1/catalogs/shop/activate", 401, "authentication_error", "unauthorized", None),
        ("DELETE", "/v1/catalogs", 405, "invalid_request_error", "method_not_allowed", None),
    ]  # fmt: skip
    for method, path, status, type_, code, param in cases:
        response = service.http.request(method, path)
        assert response.status_code == status, (path, response.text)
        error = response.json()["error"]
        assert set(error) == {"message", "type", "code", "param"} and error["message"], error
        assert (error["type"], error["code"], error["param"]) == (type_, code, param), path
    rejected = service.upload("shop", b'{"item_id": "a", "sid": [99, 0, 0]}', key="k3y")
    error = rejected.json()["error"]
    assert rejected.status_code == 422 and error["code"] == "invalid_catalog"
    assert error["type"] == "invalid_request_error"
    schema = service.http.get("/openapi.json").json()["components"]["schemas"]["ErrorDetail"]
    assert set(schema["properties"]) == {"message", "type", "code", "param"}
