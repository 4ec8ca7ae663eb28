"""Strict coercion of single cells (item ids, SID codes, popularity) with located errors.

``where`` is always a human pointer into the input ("line 7", "row 3", "key '1,2,3'"); every
error message starts with it so a rejected upload says exactly what to fix.
"""

from __future__ import annotations

import math
import re
from typing import Any

from widebeam.services.catalog.types import CatalogError

# Trie arrays store codes and token ids as int32; anything larger can never fit a layout.
MAX_CODE = 2**31 - 1
_INT_TEXT = re.compile(r"[+-]?[0-9]+")  # ASCII digits: int() also reads '٣' and '３' as 3


def item_id_from_value(value: Any, where: str) -> str:
    """A non-empty string, or an integer (bool excluded) written in decimal."""
    if isinstance(value, str) and value.strip():
        if not value.isascii():
            _check_encodable(value, where)
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise CatalogError(
        f"{where}: 'item_id' must be a non-empty string or an integer, got {value!r}"
    )


def _check_encodable(item_id: str, where: str) -> None:
    """JSON's \\ud800-style escapes decode to lone surrogates, which no UTF-8 key can hold."""
    try:
        item_id.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise CatalogError(
            f"{where}: 'item_id' {item_id!r} is not valid Unicode ({exc.reason} at character "
            f"{exc.start})"
        ) from None


def codes_from_list(values: list[Any], where: str, item_id: str) -> list[int]:
    """SID codes from a decoded JSON list (see :func:`code_from_value`)."""
    # Fast path for the common all-valid row; type() is int excludes bool.
    if (
        values
        and all(type(c) is int for c in values)
        and 0 <= min(values) <= max(values) <= MAX_CODE
    ):
        return values
    return [code_from_value(c, where, item_id, lvl) for lvl, c in enumerate(values)]


def code_from_value(value: Any, where: str, item_id: str, level: int) -> int:
    """A SID code from a decoded JSON/Arrow value: a non-negative int, never bool/float/NaN."""
    # bool is an int subclass; true/false is never a code. 3.0 is rejected too: a float column
    # usually means the codes went through a lossy pipeline.
    if isinstance(value, bool) or not isinstance(value, int):
        kind = "NaN" if isinstance(value, float) and math.isnan(value) else repr(value)
        raise CatalogError(
            f"{where}: item {item_id!r}: SID code {kind} at level {level} is not an integer"
        )
    return _check_range(value, where, item_id, level)


def codes_from_texts(texts: list[str], where: str, item_id: str) -> list[int]:
    """SID codes from CSV/JSON-key text cells (see :func:`code_from_text`)."""
    # Fast path for plain ASCII digits (isdigit alone admits '²', which int() rejects).
    if texts and all(t.isascii() and t.isdigit() for t in texts):
        codes = list(map(int, texts))
        if max(codes) <= MAX_CODE:
            return codes
    return [code_from_text(t, where, item_id, lvl) for lvl, t in enumerate(texts)]


def code_from_text(text: str, where: str, item_id: str, level: int) -> int:
    """A SID code from CSV/JSON-key text: decimal digits only."""
    s = text.strip()
    if not _INT_TEXT.fullmatch(s):
        what = "is missing" if not s else f"{s!r} is not an integer"
        raise CatalogError(f"{where}: item {item_id!r}: SID code at level {level} {what}")
    return _check_range(int(s), where, item_id, level)


def _check_range(code: int, where: str, item_id: str, level: int) -> int:
    if code < 0:
        raise CatalogError(
            f"{where}: item {item_id!r}: SID code {code} at level {level} is negative"
        )
    if code > MAX_CODE:
        raise CatalogError(
            f"{where}: item {item_id!r}: SID code {code} at level {level} is too large "
            f"(max {MAX_CODE})"
        )
    return code


def popularity_from_value(value: Any, where: str, item_id: str) -> float:
    """A finite number; None (JSON null) counts as 0."""
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CatalogError(f"{where}: item {item_id!r}: popularity {value!r} is not a number")
    try:
        out = float(value)
    except OverflowError:  # a JSON integer beyond float range
        out = math.inf
    if not math.isfinite(out):
        raise CatalogError(f"{where}: item {item_id!r}: popularity {value!r} is not finite")
    return out


def popularity_from_text(text: str, where: str, item_id: str) -> float:
    """CSV popularity: empty means 0; otherwise a finite decimal number."""
    s = text.strip()
    if not s:
        return 0.0
    try:
        out = float(s)
    except ValueError:
        raise CatalogError(f"{where}: item {item_id!r}: popularity {s!r} is not a number") from None
    if not math.isfinite(out):
        raise CatalogError(f"{where}: item {item_id!r}: popularity {s!r} is not finite")
    return out
