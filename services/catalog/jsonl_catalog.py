"""JSON-lines catalog format: one ``{"item_id": str, "sid": [int, ...]}`` object per line.

Blank lines are skipped and unknown fields ignored. Every error names its 1-based line.
An item listed twice with the same SID is kept once; with a different SID it is an error.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterable
from typing import IO, NamedTuple


class CatalogError(ValueError):
    """An invalid catalog (bad syntax, types, SIDs out of the layout, ...)."""


class CatalogEntry(NamedTuple):
    item_id: str
    sid: tuple[int, ...]


def load_jsonl_catalog(
    path_or_fileobj: str | os.PathLike[str] | IO[str] | IO[bytes],
) -> list[CatalogEntry]:
    """Read and validate a JSONL catalog; entries come back in file order (deduplicated)."""
    if isinstance(path_or_fileobj, (str, os.PathLike)):
        with open(path_or_fileobj, encoding="utf-8") as f:
            return _parse_lines(f)
    stream = path_or_fileobj
    if not isinstance(stream.read(0), bytes):
        return _parse_lines(stream)  # type: ignore[arg-type]
    text = io.TextIOWrapper(stream, encoding="utf-8")  # type: ignore[arg-type]
    try:
        return _parse_lines(text)
    finally:
        text.detach()  # otherwise collecting the wrapper would close the caller's stream


def _parse_lines(lines: Iterable[str]) -> list[CatalogEntry]:
    entries: list[CatalogEntry] = []
    # item_id -> (sid, line it was first seen on), to reject conflicting duplicates.
    seen: dict[str, tuple[tuple[int, ...], int]] = {}
    depth: int | None = None
    depth_line = 0
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        item_id, sid = _parse_record(line, lineno)
        if depth is None:
            depth, depth_line = len(sid), lineno
        elif len(sid) != depth:
            raise CatalogError(
                f"line {lineno}: SID of item {item_id!r} has {len(sid)} codes, but line "
                f"{depth_line} has {depth} (all SIDs must have the same depth)"
            )
        prev = seen.get(item_id)
        if prev is not None:
            if prev[0] != sid:
                raise CatalogError(
                    f"line {lineno}: item {item_id!r} has SID {list(sid)}, but line {prev[1]} "
                    f"gave it SID {list(prev[0])}"
                )
            continue
        seen[item_id] = (sid, lineno)
        entries.append(CatalogEntry(item_id, sid))
    if not entries:
        raise CatalogError("catalog is empty: no items")
    return entries


def _parse_record(line: str, lineno: int) -> tuple[str, tuple[int, ...]]:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise CatalogError(f"line {lineno}: malformed JSON: {exc.msg}") from None
    if not isinstance(obj, dict):
        raise CatalogError(f"line {lineno}: expected a JSON object, got {type(obj).__name__}")
    if "item_id" not in obj:
        raise CatalogError(f"line {lineno}: missing field 'item_id'")
    if "sid" not in obj:
        raise CatalogError(f"line {lineno}: missing field 'sid'")
    item_id, sid = obj["item_id"], obj["sid"]
    if not isinstance(item_id, str) or not item_id:
        raise CatalogError(f"line {lineno}: 'item_id' must be a non-empty string, got {item_id!r}")
    if not isinstance(sid, list) or not sid:
        raise CatalogError(f"line {lineno}: 'sid' must be a non-empty list of integers")
    for code in sid:
        # bool is an int subclass; JSON true/false is never a code.
        if not isinstance(code, int) or isinstance(code, bool):
            raise CatalogError(
                f"line {lineno}: item {item_id!r}: SID code {code!r} is not an integer"
            )
        if code < 0:
            raise CatalogError(f"line {lineno}: item {item_id!r}: SID code {code} is negative")
    return item_id, tuple(sid)
