"""Every format (plain and gzip, auto-detected and explicit) yields the same catalog and trie."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

from tests.services.catalog.formats import catalog_writers as cw
from widebeam.services.catalog.formats import (
    CatalogTable,
    build_trie,
    load_catalog,
    validate_table,
)
from widebeam.services.catalog.trie import SidTrie
from widebeam.services.catalog.types import CatalogEntry

REFERENCE_HASH = SidTrie.build([CatalogEntry(r[0], r[1]) for r in cw.ROWS], cw.LAYOUT).content_hash
WITH_POPULARITY = [k for k in cw.ALL_FORMATS if not k.startswith("flashrec")]


@pytest.mark.parametrize("compressed", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("case", list(cw.ALL_FORMATS))
def test_every_format_builds_the_same_trie(case: str, compressed: bool) -> None:
    fmt, data = cw.ALL_FORMATS[case]
    if compressed:
        data = cw.gz(data)
    table = load_catalog(data, codebook_size=cw.C if fmt == "sid2pid" else None)
    assert table.format == fmt  # auto-detection
    assert sorted(table.item_ids) == sorted(r[0] for r in cw.ROWS)
    assert table.sids.dtype == np.int64 and table.sids.shape == (len(cw.ROWS), 3)
    trie = SidTrie.build(table.sorted_for_trie().entries(), cw.LAYOUT)
    assert trie.content_hash == REFERENCE_HASH
    assert build_trie(table, cw.LAYOUT).content_hash == REFERENCE_HASH
    # Explicit format= gives the same table (gzip is still detected by magic bytes).
    explicit = load_catalog(data, format=fmt, codebook_size=cw.C if fmt == "sid2pid" else None)
    assert explicit.item_ids == table.item_ids
    assert np.array_equal(explicit.sids, table.sids)


@pytest.mark.parametrize("case", WITH_POPULARITY)
def test_shared_sid_items_ordered_by_popularity(case: str) -> None:
    _, data = cw.ALL_FORMATS[case]
    table = load_catalog(data, layout=cw.LAYOUT)  # sid2pid takes C from the layout
    assert table.items_by_popularity()[(15, 0, 7)] == ["12", "11", "13"]
    trie = build_trie(table, cw.LAYOUT)
    assert trie.lookup_sid([15, 0, 7]) == ["12", "11", "13"]
    assert trie.lookup_sid([3, 9, 10]) == ["21"]


def test_metadata_and_popularity_columns() -> None:
    for case in ("jsonl", "csv-comma", "parquet", "sid2pid"):
        table = load_catalog(cw.ALL_FORMATS[case][1], codebook_size=cw.C)
        by_id = dict(zip(table.item_ids, range(table.num_items), strict=True))
        i = by_id["sku-7"]
        assert table.metadata is not None and table.metadata[i]["title"] == "chair, blue", case
        assert table.popularity[i] == 1.0
        assert table.popularity.dtype == np.float64
        assert "sid" not in table.metadata[i] and "popularity" not in table.metadata[i]
    flash = load_catalog(cw.flashrec())
    assert flash.metadata is None and not flash.popularity.any()


def test_sources_path_str_stream_and_gzip_file(tmp_path: Path) -> None:
    data = cw.csv_bytes()
    plain, packed = tmp_path / "catalog.bin", tmp_path / "catalog.json"  # names mean nothing
    plain.write_bytes(data)
    packed.write_bytes(cw.gz(data))
    stream = io.BytesIO(data)
    tables = [load_catalog(plain), load_catalog(str(plain)), load_catalog(packed)]
    tables.append(load_catalog(stream))
    assert not stream.closed
    for t in tables:
        assert t.format == "csv" and t.item_ids == [r[0] for r in cw.ROWS]
    pq_path = tmp_path / "x.parquet"
    pq_path.write_bytes(cw.parquet())
    assert load_catalog(pq_path, max_bytes=1 << 20).format == "parquet"


def test_sorted_for_trie_is_stable_and_keeps_columns() -> None:
    table = CatalogTable(
        item_ids=["a", "b", "c", "d", "e"],
        sids=np.array([[1, 1], [0, 5], [1, 1], [1, 1], [0, 5]], dtype=np.int64),
        popularity=np.array([1.0, 0.0, 7.0, 1.0, 2.0]),
        metadata=[{"n": i} for i in range(5)],
    )
    out = validate_table(table).sorted_for_trie()
    assert out.item_ids == ["e", "b", "c", "a", "d"]
    assert [m["n"] for m in out.metadata or []] == [4, 1, 2, 0, 3]
    assert out.sids.tolist() == [[0, 5], [0, 5], [1, 1], [1, 1], [1, 1]]


def test_duplicate_item_with_same_sid_keeps_first_row() -> None:
    data = cw.jsonl() + b'{"item_id": "12", "sid": [15, 0, 7], "popularity": 0, "title": "dup"}\n'
    table = load_catalog(data)
    assert table.item_ids.count("12") == 1
    i = table.item_ids.index("12")
    assert table.popularity[i] == 9.0 and table.metadata is not None
    assert table.metadata[i]["title"] == "desk"


def test_flashrec_depth_four_keys() -> None:
    table = load_catalog(b'{"1,2,3,0": 10, "1,2,3,1": "x", "4,5,6,0": [7, 8]}')
    assert table.format == "flashrec" and table.depth == 4
    assert table.entries()[1] == CatalogEntry("x", (1, 2, 3, 1))
    assert table.items_by_popularity()[(4, 5, 6, 0)] == ["7", "8"]
