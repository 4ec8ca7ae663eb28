from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from widebeam.services.catalog.jsonl_catalog import CatalogEntry, CatalogError, load_jsonl_catalog


def _lines(*records: object) -> str:
    return "\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n"


def test_load_from_path_text_and_bytes(tmp_path: Path) -> None:
    text = _lines(
        {"item_id": "a", "sid": [1, 2, 3], "title": "extra fields are ignored"},
        "",
        "   ",
        {"item_id": "b", "sid": [1, 2, 4]},
        {"item_id": "c", "sid": [1, 2, 3]},
    )
    expected = [
        CatalogEntry("a", (1, 2, 3)),
        CatalogEntry("b", (1, 2, 4)),
        CatalogEntry("c", (1, 2, 3)),
    ]
    path = tmp_path / "cat.jsonl"
    path.write_text(text, encoding="utf-8")
    assert load_jsonl_catalog(path) == expected
    assert load_jsonl_catalog(str(path)) == expected
    assert load_jsonl_catalog(io.StringIO(text)) == expected
    raw = io.BytesIO(text.encode())
    assert load_jsonl_catalog(raw) == expected
    assert not raw.closed  # the caller's stream is left open
    assert load_jsonl_catalog(path)[0].sid == (1, 2, 3)


def test_same_item_same_sid_is_deduped() -> None:
    text = _lines({"item_id": "a", "sid": [1, 2]}, {"item_id": "a", "sid": [1, 2]})
    assert load_jsonl_catalog(io.StringIO(text)) == [CatalogEntry("a", (1, 2))]


def test_unicode_item_ids() -> None:
    text = _lines({"item_id": "ß\n☃", "sid": [0]})
    assert load_jsonl_catalog(io.BytesIO(text.encode()))[0].item_id == "ß\n☃"


@pytest.mark.parametrize(
    ("bad_line", "message"),
    [
        ("{not json", "line 2: malformed JSON"),
        ("[1, 2]", "line 2: expected a JSON object"),
        ('{"sid": [1, 2]}', "line 2: missing field 'item_id'"),
        ('{"item_id": "x"}', "line 2: missing field 'sid'"),
        ('{"item_id": 5, "sid": [1, 2]}', "line 2: 'item_id' must be a non-empty string"),
        ('{"item_id": "", "sid": [1, 2]}', "line 2: 'item_id' must be a non-empty string"),
        ('{"item_id": "x", "sid": "1,2"}', "line 2: 'sid' must be a non-empty list"),
        ('{"item_id": "x", "sid": []}', "line 2: 'sid' must be a non-empty list"),
        ('{"item_id": "x", "sid": [1, 2.5]}', "line 2: item 'x': SID code 2.5 is not an integer"),
        ('{"item_id": "x", "sid": [1, 2.0]}', "line 2: .*not an integer"),
        ('{"item_id": "x", "sid": [1, "2"]}', "line 2: .*not an integer"),
        ('{"item_id": "x", "sid": [1, true]}', "line 2: .*not an integer"),
        ('{"item_id": "x", "sid": [1, -2]}', "line 2: item 'x': SID code -2 is negative"),
        ('{"item_id": "x", "sid": [1, 2, 3]}', "line 2: .*3 codes, but line 1 has 2"),
        ('{"item_id": "a", "sid": [1, 3]}', r"line 2: item 'a' has SID \[1, 3\], but line 1"),
    ],
)
def test_errors_name_the_line(bad_line: str, message: str) -> None:
    text = _lines({"item_id": "a", "sid": [1, 2]}, bad_line)
    with pytest.raises(CatalogError, match=message):
        load_jsonl_catalog(io.StringIO(text))


def test_error_line_numbers_count_blank_lines() -> None:
    text = _lines({"item_id": "a", "sid": [1, 2]}, "", "", "oops")
    with pytest.raises(CatalogError, match="line 4: malformed JSON"):
        load_jsonl_catalog(io.StringIO(text))


@pytest.mark.parametrize("text", ["", "\n\n  \n"])
def test_empty_catalog(text: str) -> None:
    with pytest.raises(CatalogError, match="empty"):
        load_jsonl_catalog(io.StringIO(text))


def test_catalog_error_is_value_error() -> None:
    assert issubclass(CatalogError, ValueError)
