"""Bad input: a corpus of broken catalog files uploaded to the real catalog service. Each is
refused with a 4xx and a message, `current` stays where it was, and the service's memory
(this process: the service runs on a uvicorn thread here) grows by a bounded amount."""

from __future__ import annotations

import io
import json
import random
import threading
import time
import zlib
from collections.abc import Callable

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.reliability.support import CatalogApp, rss_bytes
from tests.services.catalog.formats import catalog_writers as cw

MiB = 1 << 20
# Peak RSS growth allowed for one rejected upload: the largest body is ~14 MiB, and the parser
# may hold a few copies of it; a leak or an unbounded structure would blow far past this.
MAX_GROWTH = 400 * MiB


def _lines(*records: object) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)


def _parquet(table: pa.Table) -> bytes:
    out = io.BytesIO()
    pq.write_table(table, out)
    return out.getvalue()


def _dup_keys(count: int) -> bytes:
    return b"{" + b'"1,2,3": "a", ' * (count - 1) + b'"1,2,3": "a"}'


def _gzip_bomb(inflated: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # gzip container
    block = b"0" * MiB
    return b"".join(packer.compress(block) for _ in range(inflated // MiB)) + packer.flush()


GOOD_ROW = {"item_id": "ok", "sid": [1, 2, 3]}
CORPUS: dict[str, Callable[[], bytes]] = {
    "truncated gzip": lambda: cw.gz(cw.jsonl())[:40],
    "gzip without trailer": lambda: cw.gz(cw.jsonl())[:-8],
    "gzip bomb (1 GiB of zeros)": lambda: _gzip_bomb(1024 * MiB),
    "sid is a string": lambda: _lines(GOOD_ROW, {"item_id": "a", "sid": "1,2,x"}),
    "sid has a float": lambda: _lines(GOOD_ROW, {"item_id": "a", "sid": [1.5, 2, 3]}),
    "sid has a bool": lambda: _lines(GOOD_ROW, {"item_id": "a", "sid": [True, 2, 3]}),
    "item_id is an object": lambda: _lines(GOOD_ROW, {"item_id": {"x": 1}, "sid": [1, 2, 3]}),
    "item_id empty": lambda: _lines(GOOD_ROW, {"item_id": "", "sid": [1, 2, 3]}),
    "popularity NaN": lambda: b'{"item_id": "a", "sid": [1, 2, 3], "popularity": NaN}\n',
    "negative code": lambda: _lines(GOOD_ROW, {"item_id": "a", "sid": [-1, 2, 3]}),
    "code over the codebook": lambda: _lines(GOOD_ROW, {"item_id": "a", "sid": [16, 2, 3]}),
    "huge code (2^63)": lambda: _lines(GOOD_ROW, {"item_id": "a", "sid": [2**63, 2, 3]}),
    "5000-digit code": lambda: b'{"item_id": "a", "sid": [' + b"1" * 5000 + b", 2, 3]}\n",
    "huge code (10^40)": lambda: _lines(GOOD_ROW, {"item_id": "a", "sid": [10**40, 2, 3]}),
    "mixed depths": lambda: _lines(GOOD_ROW, {"item_id": "a", "sid": [1, 2]}),
    "depth off the layout": lambda: _lines({"item_id": "a", "sid": [1, 2, 3, 4]}),
    "same item, two SIDs": lambda: _lines(GOOD_ROW, {"item_id": "ok", "sid": [1, 2, 4]}),
    "10^6 duplicate JSON keys": lambda: _dup_keys(10**6),
    "deeply nested JSON": lambda: (
        b'{"item_id": "a", "sid": ' + b"[" * 200_000 + b"]" * 200_000 + b"}\n"
    ),
    "deeply nested object": lambda: b'{"a": ' * 200_000,
    "top-level JSON array": lambda: json.dumps([GOOD_ROW]).encode(),
    "binary junk": lambda: random.Random(0).randbytes(64 * 1024).replace(b"\x1f\x8b", b"xx"),
    "PNG header": lambda: b"\x89PNG\r\n\x1a\n" + bytes(1024),
    "empty file": lambda: b"",
    "only blank lines": lambda: b"\n\n  \n",
    "BOM then junk": lambda: b"\xef\xbb\xbf" + b"\x00\x01garbage\n",
    "UTF-16 with BOM": lambda: "item_id,sid\na,1 2 3\n".encode("utf-16"),
    "NUL bytes in JSONL": lambda: (
        _lines(GOOD_ROW) + b'{"item_id": "a\x00", "sid": [1,\x00 2, 3]}\n'
    ),
    "huge single line (20 MiB)": lambda: b'{"item_id": "' + b"a" * (20 * MiB) + b'", "sid": [1]}',
    "CSV ragged rows": lambda: b"item_id,sid_0,sid_1,sid_2\na,1,2,3\nb,1,2\nc,1,2,3,4\n",
    "CSV without item_id": lambda: b"name,sid\na,1 2 3\n",
    "CSV code not a number": lambda: b"item_id,sid\na,1 2 x\n",
    "Parquet sid as strings": lambda: _parquet(pa.table({"item_id": ["a"], "sid": ["1,2,3"]})),
    "Parquet item_id float": lambda: _parquet(
        pa.table({"item_id": [1.5], "sid": pa.array([[1, 2, 3]], pa.list_(pa.int64()))})
    ),
    "Parquet sid_k float with NaN": lambda: _parquet(
        pa.table({"item_id": ["a"], "sid_0": [float("nan")], "sid_1": [1.0], "sid_2": [2.0]})
    ),
    "Parquet truncated": lambda: cw.parquet()[:-20],
    "FlashRec bad key": lambda: b'{"1,x,3": "a"}',
    "sid2pid bad entries": lambda: b'{"5": [{"pid": null, "count": "many"}]}',
}


class PeakRss:
    """Samples this process's RSS every 5 ms while an upload runs."""

    def __init__(self) -> None:
        self.base = rss_bytes()
        self.peak = self.base
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, rss_bytes())

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_bytes())


FIGURES: dict[str, tuple[int, float, float]] = {}


@pytest.mark.parametrize("name", list(CORPUS))
def test_broken_catalog_is_rejected(rel_catalog: CatalogApp, name: str) -> None:
    http = httpx.Client(base_url=rel_catalog.url, timeout=120)
    before = http.get("/v1/catalogs/shop").json()
    data = CORPUS[name]()
    started = time.perf_counter()
    with PeakRss() as rss:
        response = http.post(
            "/v1/catalogs/shop/versions",
            content=data,
            headers={"Content-Type": "application/octet-stream"},
        )
    elapsed = time.perf_counter() - started
    del data
    FIGURES[name] = (response.status_code, elapsed, (rss.peak - rss.base) / MiB)
    assert 400 <= response.status_code < 500, (name, response.status_code, response.text[:500])
    error = response.json()["error"]
    assert error["code"] and len(error["message"]) > 10, error
    assert len(error["message"]) < 2000, "the message must not echo the upload"
    after = http.get("/v1/catalogs/shop").json()
    assert after["current_version"] == before["current_version"]
    assert after["current"]["content_hash"] == before["current"]["content_hash"]
    assert rss.peak - rss.base < MAX_GROWTH, f"{name}: RSS grew {(rss.peak - rss.base) / MiB} MiB"


def test_bom_before_a_valid_catalog(rel_catalog: CatalogApp) -> None:
    """A UTF-8 BOM (Excel writes one) before a valid CSV: accepted whole or refused whole."""
    http = httpx.Client(base_url=rel_catalog.url, timeout=60)
    before = http.get("/v1/catalogs/bom").status_code
    response = http.post(
        "/v1/catalogs/bom/versions", content=b"\xef\xbb\xbf" + cw.csv_bytes(),
        headers={"Content-Type": "text/csv"},
    )  # fmt: skip
    assert response.status_code in (201, 422), response.text
    if response.status_code == 201:
        assert http.get("/v1/catalogs/bom/items/sku-7").json()["sid"] == [0, 1, 2]
    else:
        assert http.get("/v1/catalogs/bom").status_code == before == 404
    FIGURES["BOM + valid CSV"] = (response.status_code, 0.0, 0.0)


def test_body_over_the_upload_limit_is_413(rel_catalog: CatalogApp) -> None:
    http = httpx.Client(base_url=rel_catalog.url, timeout=60)
    limit = rel_catalog.settings.max_upload_bytes
    declared = http.post("/v1/catalogs/shop/versions", content=b"x" * (limit + 1))
    assert declared.status_code == 413 and declared.json()["error"]["code"] == "too_large"

    def chunks() -> object:  # no Content-Length: refused once the stream crosses the limit
        for _ in range(limit // MiB + 2):
            yield b"y" * MiB

    streamed = http.post("/v1/catalogs/shop/versions", content=chunks())
    assert streamed.status_code == 413
    assert http.get("/v1/catalogs/shop").json()["current_version"] == 1
    FIGURES["over max_upload_bytes (declared / chunked)"] = (413, 0.0, 0.0)


def test_zz_report() -> None:
    for name, (status, elapsed, growth) in FIGURES.items():
        print(f"\n{name}: {status} in {elapsed * 1000:.0f} ms, peak RSS +{growth:.0f} MiB", end="")
    print()
