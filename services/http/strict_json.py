"""Strict JSON for request bodies and JSON-valued options: what RFC 8259 allows and nothing
more, within limits a hostile client cannot stretch.

The standard library's parser is lenient where a server must not be: it accepts `NaN` and
`Infinity`, keeps the last of two equal keys (`{"n": 500, "n": 2}` means 2), parses integers of
any length up to its digit limit, and raises RecursionError (a 500, not a 400) on deep nesting.
`loads` refuses each of these with a `StrictJsonError` (a ValueError) naming the problem.

It is the one parser of every JSON request body, so it must cost about what the standard one
does: the per-integer digit check (a Python call per number, 4x slower on a body of numbers)
runs only when the raw text has a run of digits long enough to hold a too-long integer."""

from __future__ import annotations

import json
from typing import Any

MAX_INT_DIGITS = 30  # a 64-bit integer needs 20; beyond, a number is an attack or a mistake


class StrictJsonError(ValueError):
    """`key`: the duplicated key, when that is the problem (the field a client must fix)."""

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise StrictJsonError(f"duplicate key {key!r} in a JSON object", key=key)
            seen.add(key)
    return out


def _no_constant(name: str) -> Any:
    raise StrictJsonError(f"{name} is not a JSON number")


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise StrictJsonError(f"an integer of {len(text)} characters is too long")
    return int(text)


_DECODER = json.JSONDecoder(
    object_pairs_hook=_unique_keys, parse_constant=_no_constant, parse_int=_bounded_int
)
# The same without the per-integer hook: exact whenever no integer can be over the limit.
_NO_LONG_INTEGER_DECODER = json.JSONDecoder(
    object_pairs_hook=_unique_keys, parse_constant=_no_constant
)
# Every ASCII digit -> "0", every other byte -> " ": a too-long integer is then a run of "0"s.
_DIGITS_AS_ZERO = bytes(ord("0") if ord("0") <= b <= ord("9") else ord(" ") for b in range(256))
_LONG_DIGIT_RUN = b"0" * (MAX_INT_DIGITS + 1)


def _may_hold_long_integer(raw: bytes) -> bool:
    """Whether `raw` has more than MAX_INT_DIGITS digits in a row (in a number or a string):
    two C passes over the bytes, milliseconds for a 4 MB body."""
    return _LONG_DIGIT_RUN in raw.translate(_DIGITS_AS_ZERO)


def loads(text: str | bytes, max_depth: int | None = None) -> Any:
    """Decode one JSON document strictly; StrictJsonError says what is wrong and where.
    `max_depth` also bounds the nesting of what was decoded (walked after parsing: meant for
    small free-form values such as metadata, not for every request body)."""
    if isinstance(text, bytes):
        raw = text
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise StrictJsonError(f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    else:
        raw = text.encode("utf-8", "surrogatepass")
    decoder = _DECODER if _may_hold_long_integer(raw) else _NO_LONG_INTEGER_DECODER
    try:
        value = decoder.decode(text)
    except json.JSONDecodeError as exc:
        raise StrictJsonError(
            f"malformed JSON: {exc.msg} (line {exc.lineno} column {exc.colno})"
        ) from None
    except RecursionError:
        raise StrictJsonError("JSON is nested too deeply") from None
    if max_depth is not None and (depth := nesting_depth(value, max_depth)) > max_depth:
        raise StrictJsonError(f"JSON is nested more than {max_depth} levels deep ({depth})")
    return value


def nesting_depth(value: Any, stop_after: int) -> int:
    """How deeply arrays and objects nest in a decoded value (1 for `[1]`), counted level by
    level up to `stop_after` + 1 at most."""
    depth = 0
    level: list[Any] = [value]
    while depth <= stop_after:
        level = [node for node in level if isinstance(node, (dict, list))]
        if not level:
            break
        depth += 1
        level = [c for node in level for c in (node.values() if isinstance(node, dict) else node)]
    return depth
