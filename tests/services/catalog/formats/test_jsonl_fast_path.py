"""The JSONL fast path (whole chunks through pyarrow) accepts exactly what the row-by-row parser
accepts, with the same table, and every rejection reads the same: each input is parsed both
ways — fast path on, in chunks of several sizes, and the row-by-row parser alone — and the
results (rows, line numbers, popularity, metadata) or error messages must agree. Inputs: clean
files and hostile ones (wrong types, duplicate keys and ids, blank and indented lines, lone
carriage returns, BOMs, non-ASCII and blank ids, non-finite numbers, two objects on one line,
mixed depths across chunks, item limits, lines longer than a parser block)."""

from __future__ import annotations

import io
import json
import random

import numpy as np
import pytest

from widebeam.services.catalog.formats import CatalogError, jsonl_fast, load_catalog
from widebeam.services.catalog.formats.jsonl_table import parse_jsonl
from widebeam.services.catalog.formats.table import CatalogTable


def parse(data: bytes, chunk_bytes: int, fast: bool, max_items: int | None = None) -> object:
    """The table's contents, or the error message."""
    original = jsonl_fast.parse_chunk
    try:
        if not fast:
            jsonl_fast.parse_chunk = lambda chunk: None  # type: ignore[assignment]
        table = parse_jsonl(io.BytesIO(data), max_items, chunk_bytes=chunk_bytes)
    except CatalogError as exc:
        return f"error: {exc}"
    finally:
        jsonl_fast.parse_chunk = original  # type: ignore[assignment]
    return contents(table)


def contents(table: CatalogTable) -> tuple:
    assert table.source_rows is not None
    return (
        list(table.item_ids),
        table.sids.tolist(),
        [repr(p) for p in table.popularity.tolist()],  # repr: tells -0.0 from 0.0
        table.source_rows.tolist(),
        table.metadata,
    )


def assert_same(data: bytes, max_items: int | None = None) -> object:
    want = parse(data, 1 << 20, fast=False, max_items=max_items)
    for chunk_bytes in (1, 64, 300, 1 << 20):
        assert parse(data, chunk_bytes, fast=True, max_items=max_items) == want, chunk_bytes
    return want


def clean_rows(n: int, seed: int, depth: int = 3) -> list[bytes]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        row: dict = {"item_id": f"it-{seed}-{i}", "sid": [rng.randrange(50) for _ in
                                                          range(depth)]}  # fmt: skip
        if rng.random() < 0.7:
            row["popularity"] = rng.choice([rng.random() * 100, rng.randrange(1000), None])
        out.append(json.dumps(row).encode())
    return out


def test_clean_files_go_through_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    data = b"\n".join(clean_rows(500, 1)) + b"\n"
    calls: list[bool] = []
    original = jsonl_fast.parse_chunk
    monkeypatch.setattr(jsonl_fast, "parse_chunk", lambda c: calls.append(1) or original(c))
    table = parse_jsonl(io.BytesIO(data))
    assert table.num_items == 500 and table.source_rows.tolist() == list(range(1, 501))
    assert original(data) is not None  # the whole file is one plain chunk
    assert_same(data)
    assert_same(data.rstrip(b"\n"))  # no newline at the end
    assert_same(data.replace(b"\n", b"\r\n"))


HOSTILE_LINES = [
    b'{"item_id": 7, "sid": [1, 2, 3]}',  # integer id: legal, row-by-row
    b'{"item_id": "x", "sid": [1, 2, 3], "color": "red"}',  # metadata: legal, row-by-row
    b'{"item_id": "x", "sid_0": 1, "sid_1": 2, "sid_2": 3}',  # per-level keys: legal
    b'{"item_id": "x", "sid": [1, 2, 3], "sid": [1, 2, 4]}',  # duplicate key
    b'{"item_id": "x", "item_id": "y", "sid": [1, 2, 3]}',
    b'{"item_id": "x", "sid": [1, 2, 3], "popularity": 1, "popularity": 2}',
    b'{"item_id": "x", "sid": [1, 2.0, 3]}',
    b'{"item_id": "x", "sid": [1, true, 3]}',
    b'{"item_id": "x", "sid": [1, null, 3]}',
    b'{"item_id": "x", "sid": [1, -2, 3]}',
    b'{"item_id": "x", "sid": [1, 2147483648, 3]}',
    b'{"item_id": "x", "sid": [1, 99999999999999999999999, 3]}',
    b'{"item_id": "x", "sid": "1,2,3"}',
    b'{"item_id": "x", "sid": []}',
    b'{"item_id": "x", "sid": null}',
    b'{"item_id": "x"}',
    b'{"sid": [1, 2, 3]}',
    b'{"item_id": null, "sid": [1, 2, 3]}',
    b'{"item_id": "", "sid": [1, 2, 3]}',
    b'{"item_id": "   ", "sid": [1, 2, 3]}',
    b'{"item_id": "\\u3000", "sid": [1, 2, 3]}',  # ideographic space: blank
    b'{"item_id": "\\ud800", "sid": [1, 2, 3]}',  # lone surrogate
    '{"item_id": "漢字-ok", "sid": [1, 2, 3]}'.encode(),
    b'{"item_id": " padded ", "sid": [1, 2, 3]}',
    b'{"item_id": "x", "sid": [1, 2, 3], "popularity": NaN}',
    b'{"item_id": "x", "sid": [1, 2, 3], "popularity": Infinity}',
    b'{"item_id": "x", "sid": [1, 2, 3], "popularity": -0}',
    b'{"item_id": "x", "sid": [1, 2, 3], "popularity": 1e999}',
    b'{"item_id": "x", "sid": [1, 2, 3], "popularity": "9"}',
    b'{"item_id": "x", "sid": [1, 2, 3], "popularity": true}',
    b'{"item_id": "x", "sid": [1, 2]}',  # another depth
    b'{"item_id": "x", "sid": [1, 2, 3]} {"item_id": "y", "sid": [1, 2, 3]}',
    b'{"item_id": "x", "sid": [1, 2, 3]} garbage',
    b'{"item_id": "x", "sid": [1, 2, 3],}',
    b"[1, 2, 3]",
    b'"just a string"',
    b"",
    b"   ",
    b"\t",
    b'  {"item_id": "x", "sid": [1, 2, 3]}',  # indented: legal
    b'{"item_id": "x", "sid": [1, 2, 3]}\r{"item_id": "y", "sid": [1, 2, 3]}',  # lone \r
    b'\xef\xbb\xbf{"item_id": "x", "sid": [1, 2, 3]}',  # a BOM past the start
    b'{"item_id": "x\xff", "sid": [1, 2, 3]}',  # not UTF-8
    b'{"item_id": "x\\ty", "sid": [1, 2, 3]}',
    b'{"item_id": "x\ty", "sid": [1, 2, 3]}',  # raw control character
    b'{"item_id": "x", "sid": [1, 2, 3]}\x0c',
    b'{"item_id": "x", "sid": [[1], 2, 3]}',
    b'{"item_id": "x", "sid": {"a": 1}}',
]


@pytest.mark.parametrize("seed", range(12))
def test_hostile_files_read_the_same_both_ways(seed: int) -> None:
    rng = random.Random(seed)
    lines = clean_rows(rng.randint(1, 40), seed)
    for _ in range(rng.randint(1, 3)):
        lines.insert(rng.randrange(len(lines) + 1), rng.choice(HOSTILE_LINES))
    data = b"\n".join(lines) + rng.choice([b"\n", b""])
    if rng.random() < 0.3:
        data = b"\xef\xbb\xbf" + data
    assert_same(data)


@pytest.mark.parametrize("line", HOSTILE_LINES)
def test_each_hostile_line_reads_the_same_both_ways(line: bytes) -> None:
    before, after = clean_rows(5, 1), clean_rows(5, 2)
    assert_same(b"\n".join([*before, line, *after]) + b"\n")


def test_duplicate_ids_and_item_limits() -> None:
    rows = clean_rows(30, 3)
    dup_same = [*rows, rows[4]]  # same id, same SID: dropped by validation, first row kept
    data = b"\n".join(dup_same) + b"\n"
    assert_same(data)
    assert load_catalog(data, format="jsonl").num_items == 30
    other = json.loads(rows[4])
    other["sid"] = [49, 49, 49] if other["sid"] != [49, 49, 49] else [48, 48, 48]
    data = b"\n".join([*rows, json.dumps(other).encode()]) + b"\n"
    with pytest.raises(CatalogError, match=r"line 31: item 'it-3-4' has SID .* line 5 gave it"):
        load_catalog(data, format="jsonl")
    for limit in (1, 7, 29):
        want = assert_same(b"\n".join(rows) + b"\n", max_items=limit)
        assert isinstance(want, str) and f"line {limit + 1}: the catalog has more than" in want
    assert isinstance(assert_same(b"\n".join(rows) + b"\n", max_items=30), tuple)


def test_mixed_depths_across_chunks() -> None:
    data = b"\n".join([*clean_rows(20, 4, depth=3), *clean_rows(20, 5, depth=4)]) + b"\n"
    want = assert_same(data)
    assert isinstance(want, str) and "line 21" in want and "but line 1 has 3" in want


def test_huge_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    """A line longer than a parser block (tiny here) or than a chunk still reads the same."""
    monkeypatch.setattr(jsonl_fast, "BLOCK_BYTES", 128)
    long_id = json.dumps({"item_id": "L" * 5000, "sid": [1, 2, 3]}).encode()
    huge_meta = json.dumps({"item_id": "m", "sid": [1, 2, 3], "blob": "z" * 20000}).encode()
    rows = clean_rows(10, 6)
    want = assert_same(b"\n".join([*rows, long_id, huge_meta, *rows[:0]]) + b"\n")
    assert isinstance(want, tuple) and want[0][10] == "L" * 5000
    bad = json.dumps({"item_id": "x" * 3000, "sid": [1, "2", 3]}).encode()
    want = assert_same(b"\n".join([*rows, bad]) + b"\n")
    assert isinstance(want, str) and want.startswith("error: line 11: item 'xxx")


def test_fast_chunk_rejects_what_it_cannot_vouch_for() -> None:
    ok = b'{"item_id": "a", "sid": [1, 2, 3]}\n'
    assert jsonl_fast.parse_chunk(ok) is not None
    for bad in (b"\n" + ok, ok + b"\n" + ok, b" " + ok, ok.replace(b"\n", b"\r"), b""):
        assert jsonl_fast.parse_chunk(bad) is None, bad
    rows = jsonl_fast.parse_chunk(ok * 3)
    assert rows is not None and rows.codes.dtype == np.int64 and rows.codes.shape == (3, 3)
