"""Hostile catalog uploads against the real catalog service over HTTP (real Redis): each is
refused with a 4xx that names the problem, and nothing is published."""

from __future__ import annotations

import pytest

from tests.services.catalog.formats import catalog_writers as cw
from tests.services.catalog.service.conftest import LAYOUT_SPEC, Service, StartService
from tests.services.catalog.service.conftest import start_service as start_service  # fixture


@pytest.fixture
def service(start_service: StartService) -> Service:
    return start_service(sid_layout=LAYOUT_SPEC)


@pytest.mark.parametrize("raw", ["%2E%2E", "%2e", ".hidden", "-rf", "_x"])
def test_dot_and_dash_names_are_400(service: Service, raw: str) -> None:
    response = service.http.post(
        f"/v1/catalogs/{raw}/versions",
        content=cw.jsonl(),
        headers={"Content-Type": "application/octet-stream"},
    )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_name" and "starting with a letter or digit" in error["message"]
    assert service.http.get("/v1/catalogs").json() == {"catalogs": []}
