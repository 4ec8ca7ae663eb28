"""OpenOneRec-style ``sid2pid.json``: ``{"<packed>": [{"pid": p, "count": n, ...}, ...]}``.

A key packs a depth-3 SID with codebook size C: ``packed = a*C^2 + b*C + c``. Each list entry
is one item: ``pid`` (int or string) is the item id, ``count`` (optional, default 0) its
popularity, other keys metadata.

Codebook size rule (:func:`resolve_codebook_size`): an explicit C wins; else the caller's
layout when all its levels share one size; else the *smallest power of two* C >= 2 with
``C^3 > max key``. The inferred C is exact when the codebook is a power of two and the largest
first-level code used is >= C/8 (true for any catalog that uses its codebook reasonably
evenly); otherwise pass C explicitly, since a wrong C cannot be detected from the keys alone.
"""

from __future__ import annotations

from typing import Any

from widebeam.services.catalog.formats.builder import TableBuilder
from widebeam.services.catalog.formats.table import CatalogTable
from widebeam.services.catalog.formats.values import item_id_from_value, popularity_from_value
from widebeam.services.catalog.types import CatalogError

DEPTH = 3
_MAX_C = 1 << 21  # C^3 must stay below 2^63 so packed keys fit int64


def infer_codebook_size(max_key: int) -> int:
    """Smallest power of two C >= 2 with C^3 > max_key (see module doc for when it is exact)."""
    c = 2
    while c**DEPTH <= max_key:
        c *= 2
    return c


def resolve_codebook_size(keys: list[int], codebook_size: int | None) -> int:
    if codebook_size is None:
        codebook_size = infer_codebook_size(max(keys, default=0))
    if not 1 <= codebook_size <= _MAX_C:
        raise CatalogError(f"sid2pid codebook size {codebook_size} is outside 1..{_MAX_C}")
    return codebook_size


def parse_sid2pid(obj: dict[str, Any], codebook_size: int | None = None) -> CatalogTable:
    """Table of a decoded sid2pid object; ``codebook_size`` is C (inferred when None)."""
    if not isinstance(obj, dict):
        raise CatalogError(f"sid2pid catalog must be a JSON object, got {type(obj).__name__}")
    # Keys are checked before C is inferred so that a junk key cannot inflate the inference.
    keys = [_packed_key(k) for k in obj]
    c = resolve_codebook_size(keys, codebook_size)
    builder = TableBuilder("sid2pid", codebook_size=c)
    for pos, (key, packed, value) in enumerate(zip(obj, keys, obj.values(), strict=True), 1):
        where = f"key {key!r}"
        if packed >= c**DEPTH:
            raise CatalogError(
                f"{where}: packed SID {packed} is >= C^3 = {c**DEPTH} for codebook size C={c}"
            )
        codes = [packed // (c * c), (packed // c) % c, packed % c]
        if not isinstance(value, list) or not value:
            raise CatalogError(f"{where}: value must be a non-empty list of {{'pid': ...}} objects")
        for n, entry in enumerate(value):
            at = f"{where} entry {n}"
            if not isinstance(entry, dict) or "pid" not in entry:
                raise CatalogError(f"{at}: expected an object with a 'pid' key, got {entry!r:.80}")
            meta = dict(entry)
            item_id = item_id_from_value(meta.pop("pid"), at)
            popularity = popularity_from_value(meta.pop("count", None), at, item_id)
            builder.add(item_id, codes, at, pos, popularity, meta)
    return builder.finish()


def _packed_key(key: str) -> int:
    s = key.strip()
    # At most 19 digits: int() of a huge digit string is slow and cannot be < 2^63 anyway.
    if not (s.isascii() and s.isdigit() and len(s) <= 19) or int(s) >= 1 << 63:
        raise CatalogError(f"key {key!r}: expected a packed SID (a non-negative integer < 2^63)")
    return int(s)
