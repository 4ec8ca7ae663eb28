"""CSV catalogs (``csv`` module): a header row, then one item per record.

Columns: ``item_id``; the SID as one ``sid`` field (codes joined by ``,`` ``;`` or spaces,
quoted when they contain the delimiter, or a JSON list such as ``"[1, 2, 3]"``) or as
``sid_0..sid_{L-1}`` columns; optional ``popularity`` (empty = 0); every other column is
metadata (kept as text). The delimiter is ``,``, or tab when the header has tabs and no
comma. Line numbers in errors are the physical line on which the record ends.
"""

from __future__ import annotations

import _csv
import csv
import io
import itertools
import re
from typing import IO

from widebeam.services.catalog.formats import json_guard
from widebeam.services.catalog.formats.builder import TableBuilder
from widebeam.services.catalog.formats.table import CatalogTable
from widebeam.services.catalog.formats.values import (
    codes_from_list,
    codes_from_texts,
    item_id_from_value,
    popularity_from_text,
)
from widebeam.services.catalog.types import CatalogError

_LEVEL_COL = re.compile(r"sid_(0|[1-9][0-9]{0,5})")
_CODE_SEP = re.compile(r"[,;\s]+")


def parse_csv(stream: IO[bytes], max_items: int | None = None) -> CatalogTable:
    """Parse a CSV catalog from a binary stream (UTF-8, optional BOM), record by record."""
    text = io.TextIOWrapper(stream, encoding="utf-8-sig", newline="")
    try:
        return _parse(text, max_items)
    except UnicodeDecodeError as exc:
        raise CatalogError(f"CSV is not UTF-8 text: {exc.reason}") from None
    finally:
        text.detach()  # leave the caller's stream open


def _parse(text: io.TextIOWrapper, max_items: int | None) -> CatalogTable:
    first = text.readline()
    delimiter = "\t" if "\t" in first and "," not in first else ","
    # chain, not a generator: closing a generator would close the (detached) wrapper.
    # strict: a quote left open would otherwise swallow every later line into one field.
    reader = csv.reader(itertools.chain([first], text), delimiter=delimiter, strict=True)
    try:
        return _parse_records(reader, max_items)
    except csv.Error as exc:  # NUL bytes, oversized fields, bad quoting
        # line_num is the line the reader had reached: where the bad record ends, or the end
        # of the input for a quote never closed.
        raise CatalogError(f"line {reader.line_num}: malformed CSV: {exc}") from None


def _parse_records(reader: _csv.Reader, max_items: int | None) -> CatalogTable:
    header = next(reader, None)
    if not header or not any(h.strip() for h in header):
        raise CatalogError("line 1: CSV needs a header row naming 'item_id' and the SID columns")
    names = [h.strip() for h in header]
    dup = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if dup is not None:
        raise CatalogError(f"line 1: CSV header names column {dup!r} twice")
    if "item_id" not in names:
        raise CatalogError(f"line 1: CSV header has no 'item_id' column (columns: {names[:20]})")
    col = {n: i for i, n in enumerate(names)}
    levels = {int(m.group(1)): col[n] for n in names if (m := _LEVEL_COL.fullmatch(n))}
    if "sid" in col and levels:
        raise CatalogError("line 1: give the SID as a 'sid' column or 'sid_0'.. columns, not both")
    if "sid" not in col and not levels:
        raise CatalogError("line 1: CSV header has no 'sid' column (nor 'sid_0', 'sid_1', ..)")
    for lvl in range(len(levels)):
        if lvl not in levels:
            raise CatalogError(f"line 1: CSV header has no 'sid_{lvl}' column")
    level_cols = [levels[lvl] for lvl in range(len(levels))]
    used = {"item_id", "sid", "popularity", *(names[i] for i in level_cols)}
    meta_cols = [(n, i) for i, n in enumerate(names) if n not in used and n]

    builder = TableBuilder("csv", max_items=max_items)
    for row in reader:
        if not row or (len(row) == 1 and not row[0].strip()):
            continue  # blank line
        where = f"line {reader.line_num}"
        if len(row) != len(names):
            raise CatalogError(f"{where}: expected {len(names)} fields, got {len(row)}")
        item_id = item_id_from_value(row[col["item_id"]], where)
        if level_cols:
            codes = codes_from_texts([row[i] for i in level_cols], where, item_id)
        else:
            codes = _codes_from_field(row[col["sid"]], where, item_id)
        pop_col = col.get("popularity")
        popularity = 0.0 if pop_col is None else popularity_from_text(row[pop_col], where, item_id)
        metadata = {n: row[i] for n, i in meta_cols}
        builder.add(item_id, codes, where, reader.line_num, popularity, metadata)
    return builder.finish()


def _codes_from_field(field: str, where: str, item_id: str) -> list[int]:
    s = field.strip()
    if s.startswith("["):
        sid = json_guard.loads(s, f"{where}: item {item_id!r}: 'sid'")
        if not isinstance(sid, list) or not sid:
            raise CatalogError(f"{where}: item {item_id!r}: 'sid' must be a non-empty list")
        return codes_from_list(sid, where, item_id)
    if not s:
        raise CatalogError(f"{where}: item {item_id!r}: 'sid' is empty")
    return codes_from_texts(_CODE_SEP.split(s), where, item_id)
