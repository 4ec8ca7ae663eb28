"""Every validation failure is a CatalogError naming the line / row / key at fault."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.services.catalog.formats import catalog_writers as cw
from widebeam.services.catalog.formats import (
    CatalogError,
    CatalogTable,
    load_catalog,
    validate_table,
)
from widebeam.services.catalog.sid_layout import SidLayout


def _reject(data: bytes, *parts: str, **kwargs: object) -> None:
    with pytest.raises(CatalogError) as info:
        load_catalog(data, **kwargs)  # type: ignore[arg-type]
    for part in parts:
        assert part in str(info.value), str(info.value)


def _jsonl(*lines: str) -> bytes:
    return ("\n".join(lines) + "\n").encode()


def _parquet(**cols: pa.Array | list) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.table(cols), buf)
    return buf.getvalue()


OK = '{"item_id": "a", "sid": [1, 2, 3]}'


@pytest.mark.parametrize(
    ("line", "parts"),
    [
        ('{"item_id": "b", "sid": [1, -2, 3]}', ["line 2", "'b'", "-2", "level 1", "negative"]),
        ('{"item_id": "b", "sid": [1, 2.5, 3]}', ["line 2", "2.5", "level 1", "not an integer"]),
        ('{"item_id": "b", "sid": [1, 2, NaN]}', ["line 2", "NaN", "level 2", "not an integer"]),
        ('{"item_id": "b", "sid": [true, 2, 3]}', ["line 2", "True", "level 0"]),
        ('{"item_id": "b", "sid": [1, 2, "3"]}', ["line 2", "'3'", "not an integer"]),
        ('{"item_id": "b", "sid": [1, 2]}', ["line 2", "2 codes", "line 1 has 3", "mixed depths"]),
        ('{"item_id": "a", "sid": [1, 2, 4]}', ["line 2", "line 1", "[1, 2, 4]", "[1, 2, 3]"]),
        ('{"item_id": "b", "sid": [1, 2, 99]}', ["line 2", "'b'", "99", "level 2", "0..15"]),
        ('{"item_id": "b", "sid": [1, 2, 3], "popularity": "hot"}', ["line 2", "popularity"]),
        ('{"item_id": "b", "sid": [1, 2, 3], "popularity": Infinity}', ["line 2", "finite"]),
        ('{"item_id": true, "sid": [1, 2, 3]}', ["line 2", "item_id"]),
        ('{"item_id": "", "sid": [1, 2, 3]}', ["line 2", "item_id"]),
        ('{"sid": [1, 2, 3]}', ["line 2", "missing key 'item_id'"]),
        ('{"item_id": "b"}', ["line 2", "missing key 'sid'"]),
        ('{"item_id": "b", "sid": "1,2,3"}', ["line 2", "'sid' must be a non-empty list"]),
        ('{"item_id": "b", "sid": []}', ["line 2", "'sid' must be a non-empty list"]),
        ('{"item_id": "b", "sid_0": 1, "sid_2": 3}', ["line 2", "'sid_1'"]),
        ('{"item_id": "b", "sid": [1, 2, 3], "sid_0": 1}', ["line 2", "not both"]),
        ('{"item_id": "b", "sid": [1, 2, 3], "x": 1, "x": 2}', ["line 2", "duplicate key 'x'"]),
        ('{"item_id": "b", "sid": [1, 2, 3', ["line 2", "malformed JSON"]),
        ("[1, 2, 3]", ["line 2", "expected a JSON object"]),
        ('{"item_id": "b", "sid": [1, 2, 99999999999]}', ["line 2", "too large"]),
    ],
)
def test_jsonl_row_errors(line: str, parts: list[str]) -> None:
    _reject(_jsonl(OK, line), *parts, layout=cw.LAYOUT)


@pytest.mark.parametrize(
    ("row", "parts"),
    [
        ('b,"1,-2,3"', ["line 3", "'b'", "-2", "level 1", "negative"]),
        ('b,"1,x,3"', ["line 3", "'x'", "level 1", "not an integer"]),
        ("b,1;2.0;3", ["line 3", "'2.0'", "not an integer"]),
        ("b,1;2;nan", ["line 3", "'nan'", "level 2"]),
        ('b,"[1, true, 3]"', ["line 3", "True", "level 1"]),
        ('b,"1,2"', ["line 3", "2 codes", "line 2 has 3"]),
        ('a,"1,2,4"', ["line 3", "line 2", "[1, 2, 4]"]),
        ("b,,", ["line 3", "expected 2 fields, got 3"]),
        ("b,", ["line 3", "'sid' is empty"]),
        (',"1,2,3"', ["line 3", "item_id"]),
    ],
)
def test_csv_row_errors(row: str, parts: list[str]) -> None:
    _reject(f'item_id,sid\na,"1,2,3"\n{row}\n'.encode(), *parts)


@pytest.mark.parametrize(
    ("header", "part"),
    [
        ("id,sid", "no 'item_id' column"),
        ("item_id,title", "no 'sid' column"),
        ("item_id,sid_0,sid_2", "no 'sid_1' column"),
        ("item_id,sid,sid,title", "'sid' twice"),
        ("item_id,sid,sid_0", "not both"),
    ],
)
def test_csv_header_errors(header: str, part: str) -> None:
    _reject(f"{header}\n".encode(), "line 1", part)


def test_csv_popularity_and_levels_errors() -> None:
    _reject(b"item_id,sid_0,sid_1\na,1,\n", "line 2", "level 1", "missing")
    _reject(b"item_id,sid,popularity\na,1 2,abc\n", "line 2", "popularity 'abc'")
    _reject(b"item_id,sid,popularity\na,1 2,inf\n", "line 2", "not finite")


def test_parquet_errors() -> None:
    ids = ["a", "b", "c"]
    ok = [[1, 2, 3], [1, 2, 4], [1, 2, 5]]
    _reject(_parquet(item_id=ids, sid=[[1, 2, 3], [1, 2], [1, 2, 5]]), "row 2", "mixed depths")
    _reject(_parquet(item_id=ids, sid=[[1, 2, 3], None, [1, 2, 5]]), "row 2", "null or empty")
    _reject(_parquet(item_id=ids, sid=[[1, 2, 3], [1, None, 3], [1, 2, 5]]), "row 2", "null code")
    _reject(_parquet(item_id=ids, sid=[[1, 2, 3], [1, 2, 3], [1, -2, 5]]), "row 3", "negative")
    _reject(_parquet(item_id=ids, sid=[[1.0, 2, 3]] * 3), "'sid'", "list of integers")
    _reject(_parquet(item_id=["a", None, "c"], sid=ok), "row 2", "null 'item_id'")
    _reject(_parquet(item_id=["a", "b", " "], sid=ok), "row 3", "'item_id' is empty")
    _reject(_parquet(item_id=["a", "b", "a"], sid=ok), "row 3", "row 1", "[1, 2, 5]")
    _reject(_parquet(item_id=ids, sid=ok, popularity=["x"] * 3), "'popularity'")
    pop = pa.array([1.0, float("nan"), 2.0])
    _reject(_parquet(item_id=ids, sid=ok, popularity=pop), "row 2", "'b'", "not finite")
    _reject(_parquet(item_id=ids, sid_0=[1, 1, 1], sid_1=[True] * 3), "'sid_1'", "integer")
    _reject(_parquet(item_id=ids, sid_0=[1, None, 1]), "row 2", "'sid_0' is null")
    _reject(_parquet(item_id=ids, sid=ok), "row 2", "'b'", "level 2", "0..3", codebook_size=4)
    big = pa.array([[1, 2, 2**40]] * 3, pa.list_(pa.uint64()))
    _reject(_parquet(item_id=ids, sid=big), "row 1", "too large")
    _reject(_parquet(item_id=ids), "no 'sid' column")
    _reject(_parquet(sid=ok), "no 'item_id' column")
    _reject(cw.parquet()[:-100], "malformed Parquet")


def test_flashrec_errors() -> None:
    _reject(b'{"1,2,3": 1, "1,2": 2}', "key '1,2'", "mixed depths")
    _reject(b'{"1,2,3": 1, "1,x,3": 2}', "key '1,x,3'", "level 1")
    _reject(b'{"1,2,3": 1, "1,-2,3": 2}', "key '1,-2,3'", "negative")
    # All values 1 is FlashRec's SID-only placeholder (test_flashrec_converter.py); another
    # shared value is one item given two SIDs.
    _reject(b'{"1,2,3": 2, "1,2,4": 2}', "key '1,2,4'", "key '1,2,3'", "item '2'")
    _reject(b'{"1,2,3": 1, "1,2,4": true}', "key '1,2,4'", "item_id")
    _reject(b'{"1,2,3": 1, "1,2,4": []}', "key '1,2,4'", "empty item list")
    _reject(b'{"1,2,3": 1, "1,2,4": [{"a": 1}]}', "key '1,2,4'", "integer or a string")
    _reject(b'{"1,2,3": 1, "1,2,99": 2}', "key '1,2,99'", "level 2", layout=cw.LAYOUT)
    _reject(b'{"1,2,3,0": 1}', "4 codes", "3 levels", layout=cw.LAYOUT)


def test_sid2pid_errors() -> None:
    _reject(b'{"abc": [{"pid": 1}]}', "key 'abc'", "packed SID")
    _reject(b'{"70000": [{"pid": 1}]}', "key '70000'", "C^3", codebook_size=16)
    _reject(b'{"5": [{"pid": 1, "count": "many"}]}', "key '5' entry 0", "popularity")
    _reject(b'{"5": [{"pid": 1}, {"pid": null}]}', "key '5' entry 1", "item_id")
    _reject(
        b'{"5": [{"pid": 1}], "6": [{"name": 1}]}', "key '6' entry 0", "'pid'", format="sid2pid"
    )
    _reject(b'{"5": [{"pid": 1}], "6": [{"pid": 1}]}', "key '6'", "key '5'", codebook_size=16)
    _reject(b"[1, 2]", "expected a JSON object", format="sid2pid")


@pytest.mark.parametrize(
    "data", [b"", b"\n \n", b"item_id,sid\n", b"{}", b'{"item_id": "a"', cw.gz(b"")]
)
def test_empty_catalogs(data: bytes) -> None:
    with pytest.raises(CatalogError, match=r"empty|malformed"):
        load_catalog(data)


def test_empty_catalog_each_format() -> None:
    _reject(b"item_id,sid\n", "catalog is empty")
    _reject(_parquet(item_id=pa.array([], pa.string()), sid=pa.array([], pa.list_(pa.int64()))),
            "catalog is empty")  # fmt: skip
    _reject(b"{}", "catalog is empty")


def test_layout_incompatibility() -> None:
    layout = SidLayout.parse("100:16,116:16")  # depth 2
    _reject(cw.jsonl(), "line 1", "'11'", "3 codes", "2 levels", layout=layout)
    _reject(
        cw.csv_bytes("levels"),
        "line 2",
        "level 0",
        "0..3",
        layout=SidLayout.parse("0:4,4:16,20:16"),
    )


def test_validate_table_direct() -> None:
    def table(sids: np.ndarray, ids: list[str] | None = None) -> CatalogTable:
        n = len(sids)
        return CatalogTable(ids or [f"i{k}" for k in range(n)], sids, np.zeros(n))

    with pytest.raises(CatalogError, match="empty"):
        validate_table(table(np.zeros((0, 3), np.int64), []))
    with pytest.raises(CatalogError, match="must be integers"):
        validate_table(table(np.array([[1.0, 2.0]])))
    with pytest.raises(CatalogError, match="must be integers"):
        validate_table(table(np.array([[True, False]])))
    with pytest.raises(CatalogError, match="item #1: item 'i1': SID code -1 at level 0"):
        validate_table(table(np.array([[1, 2], [-1, 2]])))
    with pytest.raises(CatalogError, match="item #1: item 'x' has SID"):
        validate_table(table(np.array([[1, 2], [1, 3]]), ["x", "x"]))
