"""Hostile or broken inputs end in a clear CatalogError, never a crash or unbounded memory."""

from __future__ import annotations

import gzip
import io
import os
import time
import tracemalloc
from pathlib import Path

import pytest

from tests.services.catalog.formats import catalog_writers as cw
from widebeam.services.catalog.formats import CatalogError, load_catalog


def _error(data: bytes | io.IOBase | Path, **kwargs: object) -> str:
    with pytest.raises(CatalogError) as info:
        load_catalog(data, **kwargs)  # type: ignore[arg-type]
    return str(info.value)


@pytest.mark.parametrize("case", ["jsonl", "csv-comma", "parquet", "flashrec", "sid2pid"])
def test_truncated_gzip(case: str) -> None:
    packed = cw.gz(cw.ALL_FORMATS[case][1])
    assert "truncated" in _error(packed[: len(packed) // 2])
    assert "truncated" in _error(packed[:-8])  # deflate stream complete, trailer missing


def test_corrupt_gzip() -> None:
    packed = bytearray(cw.gz(cw.jsonl()))
    packed[3] = 0xFF  # reserved header flag bits set
    assert "gzip" in _error(bytes(packed))


@pytest.mark.parametrize(
    "junk",
    [
        os.urandom(4096).replace(b"\x1f\x8b", b"xx").replace(b"PAR1", b"xxxx"),
        b"\x00\x01\x02\x03" * 100,
        b"\xff\xfe\x00i\x00t\x00e\x00m",  # UTF-16
        b"\x89PNG\r\n\x1a\n" + bytes(64),
        b"item_id,sid\na,\xff\xfe\n",  # invalid UTF-8 after a valid header
    ],
)
def test_binary_junk(junk: bytes) -> None:
    msg = _error(junk)
    assert any(s in msg for s in ("not a catalog", "not UTF-8", "malformed", "line")), msg


def test_deeply_nested_json() -> None:
    deep = b"[" * 200_000 + b"]" * 200_000
    assert "nested too deeply" in _error(b'{"item_id": "a", "sid": ' + deep + b"}\n")
    assert "nested too deeply" in _error(b'{"1,2,3": ' + deep + b"}")
    assert "nested too deeply" in _error(b'{"5": [{"pid": 1, "x": ' + deep + b"}]}")
    msg = _error(b'item_id,sid\na,"' + b"[" * 100_000 + b'"\n')
    assert "line 2" in msg and "nested too deeply" in msg
    assert "nested too deeply" in _error(b'{"a": ' * 200_000, format="flashrec")


def test_million_duplicate_keys_is_rejected_with_bounded_memory() -> None:
    data = b"{" + b",".join([b'"1,2,3": 1'] * 1_000_000) + b"}"  # ~11 MB
    tracemalloc.start()
    start = time.perf_counter()
    try:
        msg = _error(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "duplicate key '1,2,3'" in msg
    assert peak < 12 * len(data)  # proportional to the (capped) input, no blow-up
    # A hang guard, not a speed claim: a quadratic duplicate check takes hours on this input.
    assert time.perf_counter() - start < 120


def test_gzip_bomb_stops_at_the_cap() -> None:
    bomb = gzip.compress(b"0" * (64 << 20), compresslevel=9)  # 64 MiB -> ~64 KiB
    assert len(bomb) < 1 << 20
    assert "limit" in _error(bomb, max_bytes=1 << 20)


def test_max_bytes_for_every_source_kind(tmp_path: Path) -> None:
    data = cw.jsonl()
    path = tmp_path / "c.jsonl"
    path.write_bytes(data)
    for src in (data, path, io.BytesIO(data)):
        assert "limit" in _error(src, max_bytes=len(data) - 1)  # type: ignore[arg-type]
        assert load_catalog(src if not isinstance(src, io.BytesIO) else io.BytesIO(data),
                            max_bytes=len(data)).num_items == len(cw.ROWS)  # fmt: skip


def test_bad_arguments_and_sources(tmp_path: Path) -> None:
    assert "unknown catalog format" in _error(cw.jsonl(), format="xml")
    assert "cannot read" in _error(tmp_path / "missing.csv")
    assert "binary" in _error(io.StringIO("item_id,sid\n"))  # type: ignore[arg-type]
    assert "codebook size" in _error(cw.sid2pid(), codebook_size=0)
    # The wrong explicit format fails loudly rather than producing a bogus catalog.
    assert "line 1" in _error(cw.jsonl(), format="csv")
    assert "JSON" in _error(cw.csv_bytes(), format="flashrec")
    assert "Parquet" in _error(cw.jsonl(), format="parquet")
    assert "malformed JSON" in _error(b'{"1,2,3": 1,}')
    assert "JSON array" in _error(b"[1, 2]")


def test_huge_numbers_do_not_crash() -> None:
    assert "malformed JSON" in _error(b'{"1,2,3": ' + b"9" * 5000 + b"}")
    assert "too large" in _error(b'{"1,2,' + b"9" * 30 + b'": 1}')
    assert "packed SID" in _error(b'{"' + b"9" * 40 + b'": [{"pid": 1}]}')
    msg = _error(b'{"item_id": "a", "sid": [1], "popularity": 1' + b"0" * 400 + b"}\n")
    assert "not finite" in msg
