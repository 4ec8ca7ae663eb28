"""Native JSONL: one object per line with ``item_id``, the SID, optional ``popularity``.

The SID is a list ``"sid": [a, b, c]`` or per-level keys ``"sid_0": a, "sid_1": b, ...``
(giving both is ambiguous and rejected). Every other key goes to the row's metadata.
Blank lines are skipped; line numbers in errors are 1-based physical lines.
"""

from __future__ import annotations

import io
import re
from typing import IO, Any

from widebeam.services.catalog.formats import json_guard
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


def parse_jsonl(stream: IO[bytes], max_items: int | None = None) -> CatalogTable:
    """Parse a JSONL catalog from a binary stream (UTF-8, optional BOM), row by row."""
    builder = TableBuilder("jsonl", max_items=max_items)
    text = io.TextIOWrapper(stream, encoding="utf-8-sig", newline=None)
    lineno = 0
    try:
        for lineno, line in enumerate(text, start=1):  # lineno is read after the loop too
            if line.strip():
                _parse_line(line, lineno, builder)
    except UnicodeDecodeError as exc:
        raise CatalogError(f"near line {lineno + 1}: not UTF-8 text: {exc.reason}") from None
    finally:
        text.detach()  # leave the caller's stream open
    return builder.finish()


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
