"""Uploads over HTTP: every format, every validation error, size limit, options."""

from __future__ import annotations

import json

import pytest

from tests.services.catalog.formats import catalog_writers as cw
from tests.services.catalog.formats.test_roundtrip import REFERENCE_HASH
from tests.services.catalog.service.conftest import LAYOUT_SPEC, Service, StartService


@pytest.mark.parametrize("compressed", [False, True], ids=["plain", "gzip"])
def test_every_format_publishes_the_same_trie(service: Service, compressed: bool) -> None:
    for i, (case, (fmt, data)) in enumerate(cw.ALL_FORMATS.items()):
        body = cw.gz(data) if compressed else data
        response = service.upload("shop", body, multipart=i % 2 == 1)  # both body shapes
        assert response.status_code == 201, (case, response.text)
        result = response.json()
        assert result["content_hash"] == REFERENCE_HASH, case
        assert result["format"] == fmt and result["activated"] is True
        assert result["version"] == i + 1 and service.current("shop") == i + 1
        assert result["stats"]["num_items"] == len(cw.ROWS) and result["stats"]["num_sids"] == 4
        assert result["layout"]["spec"] == LAYOUT_SPEC


def test_explicit_format_and_metadata(service: Service) -> None:
    meta = {"team": "recs", "tags": ["a"]}
    response = service.upload("shop", cw.csv_bytes(), format="csv", metadata=json.dumps(meta))
    assert response.status_code == 201, response.text
    info = service.http.get("/v1/catalogs/shop/versions/1").json()
    assert info["metadata"]["team"] == "recs" and info["metadata"]["tags"] == ["a"]
    assert info["metadata"]["source"] == {"format": "csv", "bytes": len(cw.csv_bytes())}
    multipart = service.upload("shop", cw.jsonl(), multipart=True, metadata=json.dumps(meta))
    assert multipart.json()["version"] == 2
    info = service.http.get("/v1/catalogs/shop/versions/2").json()
    assert info["metadata"]["source"]["filename"] == "catalog.bin"


_OK = '{"item_id": "a", "sid": [1, 2, 3]}'
INVALID = {
    # case -> (body, extra options, parts the message must contain)
    "code out of range": (_OK + '\n{"item_id": "b", "sid": [1, 2, 99]}', {}, ["line 2", "'b'"]),
    "mixed depths": (_OK + '\n{"item_id": "b", "sid": [1, 2]}', {}, ["line 2", "line 1 has 3"]),
    "duplicate item": (_OK + '\n{"item_id": "a", "sid": [1, 2, 4]}', {}, ["line 2", "line 1"]),
    "empty": ("", {}, ["empty"]),
    "blank lines only": ("\n\n  \n", {}, ["empty"]),
    "malformed jsonl": (_OK + '\n{"item_id": "b", "sid": [1, 2', {}, ["line 2", "malformed"]),
    "csv bad code": ('item_id,sid\na,"1,2,3"\nb,"1,x,3"\n', {}, ["line 3", "'x'"]),
    "flashrec bad key": ('{"1,2,3": 1, "1,2,x": 2}', {}, ["'1,2,x'"]),
    "wrong depth for layout": (
        '{"item_id": "a", "sid": [1, 2, 3, 4]}',
        {},
        ["4 codes", "3 levels"],
    ),
    "explicit format mismatch": (_OK, {"format": "parquet"}, ["Parquet"]),
}


@pytest.mark.parametrize("case", list(INVALID))
def test_invalid_catalog_is_rejected_and_changes_nothing(service: Service, case: str) -> None:
    assert service.upload("shop", cw.jsonl()).status_code == 201
    before = service.http.get("/v1/catalogs/shop").json()
    text, options, parts = INVALID[case]
    for multipart in (False, True):
        response = service.upload("shop", text.encode(), multipart=multipart, **options)
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert error["code"] == "invalid_catalog"
        for part in parts:
            assert part.lower() in error["message"].lower(), error["message"]
    assert service.http.get("/v1/catalogs/shop").json() == before  # current and versions


@pytest.mark.parametrize(
    ("options", "code", "part"),
    [
        ({"sid_layout": "1:2:3"}, "invalid_layout", "BASE:SIZE"),
        ({"format": "xml"}, "invalid_request", "unknown format"),
        ({"codebook_size": "many"}, "invalid_request", "codebook_size"),
        ({"metadata": "{not json"}, "invalid_request", "metadata"),
        ({"metadata": "[1]"}, "invalid_request", "JSON object"),
        ({"metadata": '{"source": 1}'}, "invalid_request", "reserved"),
        ({"activte": "false"}, "invalid_request", "activte"),
    ],
)
def test_bad_options_are_400(
    service: Service, options: dict[str, str], code: str, part: str
) -> None:
    for multipart in (False, True):
        response = service.upload("shop", cw.jsonl(), multipart=multipart, **options)
        assert response.status_code == 400, response.text
        assert response.json()["error"]["code"] == code
        assert part in response.json()["error"]["message"]
    assert service.http.get("/v1/catalogs/shop").status_code == 404


def test_bad_name_and_multipart_without_file(service: Service) -> None:
    response = service.upload("a:b", cw.jsonl())
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_name"
    response = service.http.post("/v1/catalogs/shop/versions", files={"other": ("x", b"1")})
    assert response.status_code == 400 and "'file'" in response.json()["error"]["message"]


def test_layout_resolution(start_service: StartService) -> None:
    service = start_service()  # no default layout configured
    response = service.upload("shop", cw.jsonl())
    assert response.status_code == 400 and response.json()["error"]["code"] == "no_layout"
    assert "sid_layout" in response.json()["error"]["message"]
    assert service.upload("shop", cw.jsonl(), sid_layout=LAYOUT_SPEC).status_code == 201
    # Later versions reuse the current version's layout ...
    second = service.upload("shop", cw.parquet())
    assert second.status_code == 201 and second.json()["layout"]["spec"] == LAYOUT_SPEC
    # ... and are validated against it (a code out of that layout's range is rejected).
    bad = service.upload("shop", b'{"item_id": "z", "sid": [1, 2, 16]}\n')
    assert bad.status_code == 422 and "0..15" in bad.json()["error"]["message"]


def test_oversized_upload_is_413_and_publishes_nothing(start_service: StartService) -> None:
    service = start_service(sid_layout=LAYOUT_SPEC, max_upload_bytes=4096)
    big = b"".join(b'{"item_id": "i%d", "sid": [1, 2, 3]}\n' % i for i in range(2000))
    for multipart in (False, True):
        response = service.upload("shop", big, multipart=multipart)
        assert response.status_code == 413, response.text
        assert "4096-byte limit" in response.json()["error"]["message"]
    # Without Content-Length (chunked): the limit is enforced while streaming.
    chunks = (big[i : i + 1000] for i in range(0, len(big), 1000))
    response = service.http.post("/v1/catalogs/shop/versions", content=chunks)
    assert response.status_code == 413
    assert service.http.get("/v1/catalogs/shop").status_code == 404
    assert service.upload("shop", cw.jsonl()).status_code == 201  # under the limit: fine
    metrics = service.http.get("/metrics").text
    assert 'widebeam_catalog_uploads_total{outcome="too_large"} 3.0' in metrics


def test_large_upload_spools_to_disk(start_service: StartService, tmp_path: object) -> None:
    service = start_service(
        sid_layout=LAYOUT_SPEC, spool_memory_bytes=1024, spool_dir=str(tmp_path)
    )
    body = b"".join(
        b'{"item_id": "i%d", "sid": [%d, %d, %d]}\n' % (i, i % 16, i // 16 % 16, i // 256 % 16)
        for i in range(4096)
    )
    response = service.upload("shop", body)
    assert response.status_code == 201 and response.json()["stats"]["num_items"] == 4096
    assert not list(tmp_path.iterdir())  # type: ignore[attr-defined]  # temp file removed


def test_activate_false_publishes_without_moving_current(service: Service) -> None:
    first = service.upload("shop", cw.jsonl(), activate=False)
    assert first.status_code == 201 and first.json()["activated"] is False
    info = service.http.get("/v1/catalogs/shop").json()
    assert info["current_version"] is None and info["versions"] == [1]
    assert service.upload("shop", cw.jsonl()).json()["activated"] is True
    staged = service.upload("shop", cw.csv_bytes(), multipart=True, activate=False)
    assert staged.json() | {"version": 3, "activated": False} == staged.json()
    assert service.current("shop") == 2


NASTY = {
    "random binary": bytes(range(256)) * 8,
    "NUL in text": b"item_id,sid\na,\x00\n",
    "latin-1 csv": 'item_id,sid\ncafé,"1,2,3"\n'.encode("latin-1"),
    "truncated gzip": cw.gz(cw.jsonl())[:40],
    "gzip of garbage": cw.gz(bytes(range(256))),
    "truncated parquet": cw.parquet()[:200],
    "json array": b"[1, 2, 3]",
    "json null": b"null",
    "empty object": b"{}",
    "deep nesting": b"{" + b'"a":{' * 5000 + b"}" * 5001,
    "flashrec nested values": b'{"1,2,3": {"x": 1}}',
    "sid2pid bad entries": b'{"12": [{"pid": null}], "13": 5}',
    "csv header only": b"item_id,sid\n",
    "csv no item_id": b"id,sid\na,1 2 3\n",
    "huge code": b'{"item_id": "a", "sid": [1, 2, 1e400]}\n',
    "long broken line": b'{"item_id": "' + b"x" * 3_000_000 + b"\n",
}


@pytest.mark.parametrize("case", list(NASTY))
def test_malformed_input_is_4xx_never_500(service: Service, case: str) -> None:
    response = service.upload("shop", NASTY[case])
    assert response.status_code in (400, 413, 422), response.text
    assert response.json()["error"]["message"]
    assert service.http.get("/v1/catalogs/shop").status_code == 404
