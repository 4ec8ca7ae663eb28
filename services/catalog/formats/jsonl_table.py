"""Native JSONL: one object per line with ``item_id``, the SID, optional ``popularity``.

The SID is a list ``"sid": [a, b, c]`` or per-level keys ``"sid_0": a, "sid_1": b, ...``
(giving both is ambiguous and rejected). Every other key goes to the row's metadata.
Blank lines are skipped; line numbers in errors are 1-based physical lines. Lines end at
"\n", "\r\n" or "\r".
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from typing import IO, Any

import numpy as np

from widebeam.services.catalog.formats import json_guard, jsonl_fast
from widebeam.services.catalog.formats.builder import TableBuilder
from widebeam.services.catalog.formats.table import CatalogTable
from widebeam.services.catalog.formats.values import (
    code_from_value,
    codes_from_list,
    item_id_from_value,
    popularity_from_value,
)
from widebeam.services.catalog.types import CatalogError

_LEVEL_KEY = re.compile(r"sid_(0|[1-9][0-9]{0,5})")  # no leading zeros: one key per level
_BOM = b"\xef\xbb\xbf"  # utf-8-sig: dropped at the start of the input only
CHUNK_BYTES = 32 << 20
# The first piece is small and each next one twice the last (up to CHUNK_BYTES): a row limit
# is checked after each piece, so an input far over it (a gzip bomb) is stopped after about
# twice the bytes the limit allows, not after a whole 32 MiB piece.
FIRST_CHUNK_BYTES = 1 << 20


def parse_jsonl(
    stream: IO[bytes], max_items: int | None = None, chunk_bytes: int = CHUNK_BYTES
) -> CatalogTable:
    """Parse a JSONL catalog from a binary stream (UTF-8, optional BOM), ``chunk_bytes`` of
    whole lines at a time: each chunk through the fast path when it is all plain rows
    (``jsonl_fast``), else row by row. Memory: the rows parsed so far plus one chunk."""
    builder = TableBuilder("jsonl", max_items=max_items)
    lines = 0  # physical lines before the current chunk
    for index, whole_lines in enumerate(_line_chunks(stream, chunk_bytes)):
        chunk = (
            whole_lines[len(_BOM) :] if index == 0 and whole_lines.startswith(_BOM) else whole_lines
        )
        rows = jsonl_fast.parse_chunk(chunk)
        if rows is None:
            lines = _parse_rows(chunk, lines, builder)
            continue
        n = len(rows.item_ids)
        numbers = np.arange(lines + 1, lines + n + 1, dtype=np.int64)
        builder.add_block(rows.item_ids, rows.codes, numbers, rows.popularity, "line")
        lines += n
    return builder.finish()


def _line_chunks(stream: IO[bytes], chunk_bytes: int) -> Iterator[bytes]:
    """The stream in pieces that end at a line end (a longer line is one piece), growing from
    ``FIRST_CHUNK_BYTES`` to about ``chunk_bytes``; "\n" ends every line, so no "\r\n" or
    UTF-8 sequence is ever split."""
    pending = b""
    size = min(FIRST_CHUNK_BYTES, chunk_bytes)
    while True:
        data = stream.read(size)
        size = min(2 * size, chunk_bytes)
        if not data:
            if pending:
                yield pending
            return
        buf = pending + data if pending else data
        cut = buf.rfind(b"\n") + 1
        if cut == 0:
            pending = buf
            continue
        pending = buf[cut:]
        yield buf[:cut] if cut < len(buf) else buf


def _parse_rows(chunk: bytes, lines_before: int, builder: TableBuilder) -> int:
    """Row-by-row parse of one chunk; returns the physical lines read so far. Bytes that are
    not UTF-8 are reported at their line, after the lines before them were parsed."""
    try:
        text, bad = chunk.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        cut = chunk.rfind(b"\n", 0, exc.start) + 1
        text, bad = chunk[:cut].decode("utf-8"), exc
    lineno = lines_before
    for lineno, line in enumerate(io.StringIO(text, newline=None), start=lines_before + 1):
        if line.strip():
            _parse_line(line, lineno, builder)
    if bad is not None:
        raise CatalogError(f"near line {lineno + 1}: not UTF-8 text: {bad.reason}")
    return lineno


def _parse_line(line: str, lineno: int, builder: TableBuilder) -> None:
    where = f"line {lineno}"
    obj = json_guard.loads(line, where)
    if not isinstance(obj, dict):
        raise CatalogError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    if "item_id" not in obj:
        raise CatalogError(f"{where}: missing key 'item_id'")
    item_id = item_id_from_value(obj.pop("item_id"), where)
    codes = sid_from_object(obj, where, item_id)
    popularity = popularity_from_value(obj.pop("popularity", None), where, item_id)
    builder.add(item_id, codes, where, lineno, popularity, obj)


def sid_from_object(obj: dict[str, Any], where: str, item_id: str) -> list[int]:
    """Pop the SID out of ``obj`` (``sid`` list or ``sid_0..sid_{L-1}``); the rest is metadata."""
    levels = {int(m.group(1)): k for k in obj if (m := _LEVEL_KEY.fullmatch(k))}
    if "sid" in obj:
        if levels:
            raise CatalogError(
                f"{where}: item {item_id!r}: give the SID as 'sid' or as 'sid_0'.. keys, not both"
            )
        sid = obj.pop("sid")
        if not isinstance(sid, list) or not sid:
            raise CatalogError(
                f"{where}: item {item_id!r}: 'sid' must be a non-empty list of integers, "
                f"got {type(sid).__name__}"
            )
        return codes_from_list(sid, where, item_id)
    if not levels:
        raise CatalogError(
            f"{where}: item {item_id!r}: missing key 'sid' (or 'sid_0', 'sid_1', ..)"
        )
    for lvl in range(len(levels)):  # keys are unique ints, so 0..n-1 all present <=> contiguous
        if lvl not in levels:
            raise CatalogError(f"{where}: item {item_id!r}: missing key 'sid_{lvl}'")
    return [
        code_from_value(obj.pop(levels[lvl]), where, item_id, lvl) for lvl in range(len(levels))
    ]
