"""``load_catalog``: any supported catalog input -> a validated ``CatalogTable``."""

from __future__ import annotations

import io
import os
from typing import IO

from widebeam.services.catalog.formats import json_guard
from widebeam.services.catalog.formats.bulk import paused_gc
from widebeam.services.catalog.formats.csv_table import parse_csv
from widebeam.services.catalog.formats.detect import HEAD_BYTES, json_object_format, sniff_format
from widebeam.services.catalog.formats.flashrec import parse_flashrec
from widebeam.services.catalog.formats.jsonl_table import parse_jsonl
from widebeam.services.catalog.formats.parquet_table import parse_parquet
from widebeam.services.catalog.formats.sid2pid import parse_sid2pid
from widebeam.services.catalog.formats.source import DEFAULT_MAX_BYTES, RawInput, open_input
from widebeam.services.catalog.formats.table import CatalogTable
from widebeam.services.catalog.formats.validate import validate_table
from widebeam.services.catalog.sid_layout import SidLayout
from widebeam.services.catalog.types import CatalogError

FORMATS = ("jsonl", "csv", "parquet", "flashrec", "sid2pid")


def load_catalog(
    source: bytes | str | os.PathLike[str] | IO[bytes],
    *,
    format: str | None = None,
    codebook_size: int | None = None,
    max_bytes: int | None = None,
    layout: SidLayout | None = None,
    max_items: int | None = None,
) -> CatalogTable:
    """Parse and validate a catalog; raises ``CatalogError`` naming the offending row/key.

    ``source``: content bytes, a path (``str`` is always a path), or a binary stream.
    ``format``: one of :data:`FORMATS`, or None to auto-detect (``detect.sniff_format``);
    gzip is detected from its magic bytes either way. ``codebook_size``: per-level codebook
    size C; unpacks sid2pid keys and, for every format, rejects codes >= C.
    ``max_bytes``: limit on the uncompressed input (default 2 GiB). ``layout``: when given,
    the catalog must fit it (depth, per-level sizes); it also decides sid2pid's C and whether
    a FlashRec key's extra last code is its end marker. ``max_items``: the most items a
    catalog may have, checked as rows are read (None: no limit).
    """
    if format is not None and format not in FORMATS:
        raise CatalogError(f"unknown catalog format {format!r}; expected one of {list(FORMATS)}")
    if codebook_size is not None and codebook_size < 1:
        raise CatalogError(f"codebook size must be positive, got {codebook_size}")
    raw = open_input(source, DEFAULT_MAX_BYTES if max_bytes is None else max_bytes)
    if format is None:
        head = raw.head(HEAD_BYTES + 1)
        format = sniff_format(head[:HEAD_BYTES], complete=len(head) <= HEAD_BYTES)
    with paused_gc():
        table = _parse(raw, format, codebook_size, layout, max_items)
        if codebook_size is not None:
            table.codebook_size = codebook_size
        return validate_table(table, layout)


def _parse(
    raw: RawInput,
    format: str,
    codebook_size: int | None,
    layout: SidLayout | None,
    max_items: int | None,
) -> CatalogTable:
    if format == "parquet":
        # Parquet seeks: a plain file is read in place, anything else whole (under the cap).
        path = raw.seekable_path
        stream = path if path is not None else io.BytesIO(raw.read_all())
        return parse_parquet(stream, max_items=max_items)
    if format in ("jsonl", "csv"):
        with raw.open() as stream:
            parse = parse_jsonl if format == "jsonl" else parse_csv
            return parse(stream, max_items)
    obj = json_guard.loads(raw.read_all(), "input")
    if not isinstance(obj, dict):
        raise CatalogError(f"input: expected a JSON object at top level, got {type(obj).__name__}")
    if format == "json":
        format = json_object_format(obj)
    if format == "flashrec":
        return parse_flashrec(obj, layout, max_items)
    return parse_sid2pid(obj, codebook_size, layout, max_items)
