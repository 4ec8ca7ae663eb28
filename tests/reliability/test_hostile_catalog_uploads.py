"""Hostile catalog uploads against the real catalog service over HTTP (real Redis): each is
refused with a 4xx that names the problem, and nothing is published."""

from __future__ import annotations

import gzip
import tracemalloc

import pytest

from tests.services.catalog.formats import catalog_writers as cw
from tests.services.catalog.service.conftest import LAYOUT_SPEC, Service, StartService
from tests.services.catalog.service.conftest import start_service as start_service  # fixture
from widebeam.services.catalog.formats import load_catalog
from widebeam.services.catalog.types import CatalogError


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


def _nothing_published(service: Service, name: str = "shop") -> None:
    assert service.current(name) is None
    assert service.http.get("/v1/catalogs").json() == {"catalogs": []}


def _rows(n: int) -> list[cw.Row]:
    return [(f"item-{i}", (i % 16, i // 16 % 16, i // 256 % 16), 1.0, "t") for i in range(n)]


@pytest.mark.parametrize(
    "metadata, problem",
    [
        ('{"score": NaN}', "NaN is not a JSON number"),
        ('{"score": Infinity}', "Infinity is not a JSON number"),
        ('{"score": -Infinity}', "-Infinity is not a JSON number"),
        ('{"a": ' + "[" * 1100 + "]" * 1100 + "}", "nested too deeply"),
        ('{"a": ' + "[" * 40 + "]" * 40 + "}", "more than 32 levels deep"),
        ('{"a": 1, "a": 2}', "duplicate key 'a'"),
    ],
)
def test_hostile_metadata_is_400_before_the_body_is_read(
    service: Service, metadata: str, problem: str
) -> None:
    response = service.upload("shop", cw.jsonl(), metadata=metadata)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "metadata" and problem in error["message"], error
    multipart = service.upload("shop", cw.jsonl(), multipart=True, metadata=metadata)
    assert multipart.status_code == 400 and problem in multipart.json()["error"]["message"]
    _nothing_published(service)


def test_a_lone_surrogate_item_id_is_422_naming_the_line(service: Service) -> None:
    body = cw.jsonl(rows=_rows(5)) + b'{"item_id": "bad-\\ud800", "sid": [1, 2, 3]}\n'
    response = service.upload("shop", body)
    assert response.status_code == 422, response.text
    message = response.json()["error"]["message"]
    assert message.startswith("line 6: 'item_id'") and "not valid Unicode" in message, message
    _nothing_published(service)


def _multipart(data: bytes, boundary: str = "widebeam-test-boundary") -> tuple[bytes, str]:
    body = (
        (
            f"--{boundary}\r\n"
            'Content-Disposition: form-data; name="file"; filename="catalog.jsonl"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        + data
        + f"\r\n--{boundary}--\r\n".encode()
    )
    return body, f"multipart/form-data; boundary={boundary}"


@pytest.mark.parametrize("cut", ["mid-file", "before-closing-boundary", "mid-closing-boundary"])
def test_a_multipart_upload_cut_off_is_400_and_publishes_nothing(
    service: Service, cut: str
) -> None:
    data = cw.jsonl(rows=_rows(3000))
    body, content_type = _multipart(data)
    closing = body.rindex(b"\r\n--")
    end = {
        "mid-file": len(body) * 2 // 5,  # whole lines of some 1,200 items before the cut
        "before-closing-boundary": closing,
        "mid-closing-boundary": closing + 8,
    }[cut]
    response = service.http.post(
        "/v1/catalogs/shop/versions", content=body[:end], headers={"Content-Type": content_type}
    )
    assert response.status_code == 400, response.text
    assert "before its closing boundary" in response.json()["error"]["message"]
    _nothing_published(service)
    whole = service.http.post(
        "/v1/catalogs/shop/versions", content=body, headers={"Content-Type": content_type}
    )
    assert whole.status_code == 201 and whole.json()["stats"]["num_items"] == 3000


@pytest.mark.parametrize(
    "csv_text, problem",
    [
        ('item_id,sid\na,"1,2,3\nb,4 5 6\nc,7 8 9\n', "line 4: malformed CSV: unexpected end"),
        ('item_id,sid\na,"1,2,3\nb,"4,5,6"\nc,7 8 9\n', "line 3: malformed CSV"),
        ("item_id,sid_0,sid_1,sid_2\na,1,2,\u0663\n", "line 2: item 'a': SID code at level 2"),
        ("item_id,sid\na,1 \uff12 3\n", "line 2: item 'a': SID code at level 1"),
        ('item_id,sid\na,"1,2,3"x\n', "line 2: malformed CSV"),
    ],
)
def test_malformed_csv_is_422_naming_the_line(
    service: Service, csv_text: str, problem: str
) -> None:
    response = service.upload("shop", csv_text.encode(), format="csv")
    assert response.status_code == 422, response.text
    assert problem in response.json()["error"]["message"], response.json()
    _nothing_published(service)


def _jsonl_gzip_bomb(rows: int) -> bytes:
    line = b'{"item_id": "x", "sid": [1, 2, 3]}\n'
    return gzip.compress(line * rows, compresslevel=9)


def test_a_gzip_bomb_stops_at_the_item_limit_while_it_streams(start_service: StartService) -> None:
    service = start_service(sid_layout=LAYOUT_SPEC, max_items=1000)
    bomb = _jsonl_gzip_bomb(400_000)  # ~14 MB of rows in ~30 KB
    response = service.upload("shop", bomb)
    assert response.status_code == 422, response.text
    assert (
        "line 1001: the catalog has more than its limit of 1000 items"
        in (response.json()["error"]["message"])
    )
    _nothing_published(service)


def test_gzip_input_is_inflated_as_it_is_parsed() -> None:
    # The rows are parsed from the inflating stream: stopping at the item limit costs a few
    # read buffers (1 MiB chunks) and the rows read so far, never the inflated text (~72 MB,
    # which was inflated whole before parsing).
    bomb = _jsonl_gzip_bomb(2_000_000)
    tracemalloc.start()
    try:
        with pytest.raises(CatalogError, match="more than its limit of 100 items"):
            load_catalog(bomb, max_items=100)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16_000_000, peak
    with pytest.raises(CatalogError, match="inflates to more than the 4000000-byte limit"):
        load_catalog(bomb, max_bytes=4_000_000)
