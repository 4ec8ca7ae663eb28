"""FlashRec-style JSON object: ``{"a,b,c": item, ...}``, one key per SID.

A value is one item id (int or string) or a list of them (several items sharing the SID, in
list order). Keys of four codes ``"a,b,c,1"`` are depth-4 SIDs (the 4th code disambiguates
items that share a 3-code SID); every key of one file must have the same depth. There is no
popularity (all 0), so items of one SID keep file order. A repeated key is an error
(``json_guard``), since JSON parsers would silently keep only the last value.
"""

from __future__ import annotations

from typing import Any

from widebeam.services.catalog.formats.builder import TableBuilder
from widebeam.services.catalog.formats.table import CatalogTable
from widebeam.services.catalog.formats.values import codes_from_texts, item_id_from_value
from widebeam.services.catalog.types import CatalogError


def parse_flashrec(obj: dict[str, Any]) -> CatalogTable:
    """Table of a decoded FlashRec JSON object (see ``json_guard.loads`` for decoding)."""
    if not isinstance(obj, dict):
        raise CatalogError(f"FlashRec catalog must be a JSON object, got {type(obj).__name__}")
    builder = TableBuilder("flashrec")
    for pos, (key, value) in enumerate(obj.items(), start=1):
        where = f"key {key!r}"
        items = value if isinstance(value, list) else [value]
        if not items:
            raise CatalogError(f"{where}: empty item list")
        ids = [_item_id(v, where) for v in items]
        codes = codes_from_texts(key.split(","), where, ids[0])
        for item_id in ids:
            builder.add(item_id, codes, where, pos)
    return builder.finish()


def _item_id(value: Any, where: str) -> str:
    if isinstance(value, (list, dict)):
        raise CatalogError(f"{where}: item id must be an integer or a string, got {value!r:.80}")
    return item_id_from_value(value, where)
