"""Auto-detection edge cases and format-specific parsing details."""

from __future__ import annotations

import json

import pytest

from tests.services.catalog.formats import catalog_writers as cw
from widebeam.services.catalog.formats import CatalogError, infer_codebook_size, load_catalog
from widebeam.services.catalog.formats.detect import json_object_format, sniff_format


@pytest.mark.parametrize(
    ("data", "fmt"),
    [
        (b'\xef\xbb\xbf{"item_id": "a", "sid": [1]}', "jsonl"),  # BOM, one line, no newline
        (b'\n\n  {"item_id": "a", "sid": [1]}\n', "jsonl"),
        (b'{"sid": [1], "item_id": "a"}\n{"item_id": "b", "sid": [2]}\n', "jsonl"),
        (b'{\n  "1,2,3": 5\n}\n', "flashrec"),  # pretty-printed object
        (b'{"1,2,3": [{"pid": 5}]}', "sid2pid"),
        (b'{"66051": 5}', "flashrec"),  # value shape decides, not key shape
        (b"\xef\xbb\xbfitem_id,sid\na,1 2\n", "csv"),
        (b"item_id\tsid_0\tsid_1\ta\tb\n", "csv"),
    ],
)
def test_sniffing(data: bytes, fmt: str) -> None:
    head = sniff_format(data, complete=True)
    got = json_object_format(json.loads(data.lstrip(b"\xef\xbb\xbf"))) if head == "json" else head
    assert got == fmt


def test_long_first_jsonl_line_is_still_jsonl() -> None:
    line = json.dumps({"item_id": "a", "sid": [1, 2], "blob": "x" * (2 << 20)}) + "\n"
    table = load_catalog(line.encode() * 2 + b'{"item_id": "b", "sid": [1, 3]}\n')
    assert table.format == "jsonl" and table.item_ids == ["a", "b"]


def test_jsonl_first_line_without_item_id_is_reported_as_jsonl() -> None:
    with pytest.raises(CatalogError, match="line 1: missing key 'item_id'"):
        load_catalog(b'{"sid": [1]}\n{"item_id": "b", "sid": [2]}\n')


def test_tsv_and_metadata_text() -> None:
    table = load_catalog(b"item_id\tsid_0\tsid_1\ttitle\na\t1\t2\tx, y\n\nb\t1\t3\t\n")
    assert table.format == "csv" and table.sids.tolist() == [[1, 2], [1, 3]]
    assert table.metadata == [{"title": "x, y"}, {"title": ""}]
    assert table.source_rows is not None and table.source_rows.tolist() == [2, 4]


def test_jsonl_blank_lines_extra_keys_and_file_order() -> None:
    text = (
        '{"item_id": "a", "sid": [1, 2, 3], "title": "extra keys are metadata"}\n'
        "\n   \n"
        '{"item_id": "b", "sid": [1, 2, 4]}\n{"item_id": "c", "sid": [1, 2, 3]}\n'
    )
    table = load_catalog(text.encode())
    assert table.item_ids == ["a", "b", "c"] and table.sids.tolist()[2] == [1, 2, 3]
    assert table.metadata == [{"title": "extra keys are metadata"}, {}, {}]
    assert table.items_by_popularity()[(1, 2, 3)] == ["a", "c"]  # no popularity: file order
    # Line numbers in errors count the blank lines.
    with pytest.raises(CatalogError, match="line 6: malformed JSON"):
        load_catalog(text.encode() + b"oops\n")


def test_unicode_item_ids() -> None:
    table = load_catalog(json.dumps({"item_id": "ß\n☃", "sid": [0]}, ensure_ascii=False).encode())
    assert table.item_ids == ["ß\n☃"]


def test_integer_item_ids_become_strings() -> None:
    table = load_catalog(b'{"item_id": 7, "sid": [1, 2]}\n')
    assert table.item_ids == ["7"]


@pytest.mark.parametrize(
    ("max_key", "c"), [(0, 2), (7, 2), (8, 4), (16**3 - 1, 16), (8191 * 8192**2, 8192)]
)
def test_infer_codebook_size(max_key: int, c: int) -> None:
    assert infer_codebook_size(max_key) == c


def test_sid2pid_codebook_size_sources() -> None:
    data = cw.sid2pid()
    inferred = load_catalog(data)
    assert inferred.codebook_size == cw.C  # the catalog uses first-level code 15 >= C/8
    from_layout = load_catalog(data, layout=cw.LAYOUT)
    explicit = load_catalog(data, codebook_size=cw.C)
    for t in (from_layout, explicit):
        assert t.sids.tolist() == inferred.sids.tolist()
    # With a different C the same keys unpack to different codes: C must be right.
    other = load_catalog(data, codebook_size=32)
    assert other.sids.tolist() != inferred.sids.tolist()
    assert other.describe_row(0) == f"key '{json.loads(data).__iter__().__next__()}'"
