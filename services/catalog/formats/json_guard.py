"""``json.loads`` that reports every failure as a located ``CatalogError``.

Two traps of the stdlib parser are closed here: deeply nested input raises RecursionError
(not a ValueError), and a repeated object key silently keeps the last value, which for a
key -> items map would drop items without a word. Repeated keys are therefore an error.
"""

from __future__ import annotations

import json
from typing import Any

from widebeam.services.catalog.types import CatalogError


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:  # only on the error path: find the first repeat to name it
            if key in seen:
                raise CatalogError(f"duplicate key {key!r} in a JSON object")
            seen.add(key)
    return out


# One shared decoder: json.loads(..., object_pairs_hook=...) builds a new one per call, which
# was a fifth of the per-line cost of a JSONL catalog. JSONDecoder.decode keeps no state.
_DECODER = json.JSONDecoder(object_pairs_hook=_unique_keys)


def loads(text: str | bytes, where: str) -> Any:
    """Decode UTF-8 JSON; ``where`` ("line 4", "input") prefixes every error message."""
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8-sig")
        return _DECODER.decode(text)
    except CatalogError as exc:
        raise CatalogError(f"{where}: {exc}") from None
    except json.JSONDecodeError as exc:
        pos = f"column {exc.colno}" if exc.lineno == 1 else f"line {exc.lineno} column {exc.colno}"
        raise CatalogError(f"{where}: malformed JSON: {exc.msg} ({pos})") from None
    except RecursionError:
        raise CatalogError(f"{where}: JSON is nested too deeply") from None
    except UnicodeDecodeError as exc:
        raise CatalogError(f"{where}: not UTF-8 text: {exc.reason}") from None
    except ValueError as exc:  # e.g. an integer literal with too many digits
        raise CatalogError(f"{where}: malformed JSON: {exc}") from None
