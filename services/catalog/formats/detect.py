"""Format auto-detection from the first bytes of the (already gunzipped) input.

Rules, in order: ``PAR1`` magic -> Parquet; first non-blank character ``{`` -> JSONL when
the first non-blank line is itself a JSON object with an ``item_id`` key or followed by more
lines, otherwise one
JSON object document (FlashRec or sid2pid, told apart by :func:`json_object_format` once
decoded); a top-level JSON array is rejected; anything else that is UTF-8 text -> CSV.
NUL bytes or invalid UTF-8 in the head reject the input early instead of producing
confusing CSV errors.
"""

from __future__ import annotations

import codecs
import json
import re
from typing import Any

from widebeam.services.catalog.types import CatalogError

PARQUET_MAGIC = b"PAR1"
HEAD_BYTES = 1 << 20
_BOM = b"\xef\xbb\xbf"
# Fallback when the first line is longer than the head: JSONL rows usually lead with item_id.
_ITEM_ID_FIRST = re.compile(r'\s*\{\s*"item_id"\s*:')


def sniff_format(head: bytes, complete: bool) -> str:
    """'parquet', 'jsonl', 'json' (an object document) or 'csv' for the input's first bytes.

    ``complete`` says whether ``head`` is the whole input.
    """
    if head.startswith(PARQUET_MAGIC):
        return "parquet"
    body = head.removeprefix(_BOM)
    if not body.strip():
        raise CatalogError("catalog is empty: the input has no content")
    if b"\x00" in body:
        raise CatalogError("input is not a catalog: binary data that is neither gzip nor Parquet")
    try:
        # Incremental decode tolerates a multi-byte character cut at the end of the head.
        text = codecs.getincrementaldecoder("utf-8")().decode(body, final=complete)
    except UnicodeDecodeError as exc:
        raise CatalogError(
            f"input is not a catalog: not UTF-8 text (byte {exc.start}), gzip or Parquet"
        ) from None
    stripped = text.lstrip()
    if stripped.startswith("["):
        raise CatalogError(
            "input: a top-level JSON array is not a catalog format; use JSONL (one object per "
            "line) or a JSON object (FlashRec / sid2pid)"
        )
    if not stripped.startswith("{"):
        return "csv"
    line, newline, rest = stripped.partition("\n")
    if newline or complete:
        try:
            first = json.loads(line)
        except (ValueError, RecursionError):
            return "json"  # e.g. a pretty-printed object whose first line is just "{"
        # A complete object followed by more content cannot be one JSON document, so it is
        # JSONL even without item_id (the JSONL parser then names the missing key).
        is_rows = isinstance(first, dict) and ("item_id" in first or bool(rest.strip()))
        return "jsonl" if is_rows else "json"
    return "jsonl" if _ITEM_ID_FIRST.match(stripped) else "json"


def json_object_format(obj: Any) -> str:
    """'sid2pid' when the first value is a list of objects with 'pid' (sid2pid.json) or 'iid'
    (sid2iid.json), else 'flashrec'."""
    if isinstance(obj, dict) and obj:
        value = next(iter(obj.values()))
        entry = value[0] if isinstance(value, list) and value else None
        if isinstance(entry, dict) and ("pid" in entry or "iid" in entry):
            return "sid2pid"
    return "flashrec"
