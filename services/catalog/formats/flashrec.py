"""FlashRec's SID vocab file (``--sid-vocab-file``): one JSON object, one comma key per SID.

Two shapes:

* **SID-only**, as FlashRec's RecIF converter writes it (``python/flashrec/catalog.py`` of
  sohu-mptc/FlashRec): ``{"a,b,c,1":1,"d,e,f,1":1}``, every value the placeholder ``1``. Such a
  file names SIDs, not items, so each SID becomes one item whose id is its codes joined by
  ``-`` (:func:`sid_item_id`, e.g. ``"12-5-300"``).
* **Items**: a value is an item id (int or string) or a list of them (several items sharing
  the SID, in list order). There is no popularity (all 0), so items of one SID keep file order.

Keys: ``"a,b,c"`` is a SID of the layout's depth. FlashRec's converter appends its
``<|sid_end|>`` level by default (``"a,b,c,1"``: a last "codebook" of ``{<|sid_begin|>,
<|sid_end|>}`` in which code 1 is the end token), so on a layout *with an end token* a key of
one code more than the layout's depth must end in 1, which is dropped: ``"a,b,c,1"`` is SID
``(a, b, c)``. Without a layout, keys are taken as they are. Every key of one file must give
the same depth. A repeated key is an error (``json_guard``), since JSON parsers would silently
keep only the last value.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from widebeam.services.catalog.formats.builder import TableBuilder
from widebeam.services.catalog.formats.table import CatalogTable
from widebeam.services.catalog.formats.values import codes_from_texts, item_id_from_value
from widebeam.services.catalog.sid_layout import SidLayout
from widebeam.services.catalog.types import CatalogError

# The value FlashRec's converter writes for every key: the key is all there is.
PLACEHOLDER_VALUE = 1
# In FlashRec's trailing level {<|sid_begin|>, <|sid_end|>}, code 1 is <|sid_end|>.
END_MARKER_CODE = 1
SID_ITEM_SEPARATOR = "-"


def sid_item_id(codes: Sequence[int]) -> str:
    """The item id a SID-only catalog gives SID ``codes``: ``(12, 5, 300)`` -> ``"12-5-300"``."""
    return SID_ITEM_SEPARATOR.join(map(str, codes))


def is_sid_only(obj: dict[str, Any]) -> bool:
    """Whether every value is the placeholder ``1`` (``true`` is not: bool is no item id)."""
    return bool(obj) and all(
        type(value) is int and value == PLACEHOLDER_VALUE for value in obj.values()
    )


def parse_flashrec(
    obj: dict[str, Any], layout: SidLayout | None = None, max_items: int | None = None
) -> CatalogTable:
    """Table of a decoded FlashRec JSON object (see ``json_guard.loads`` for decoding).

    ``layout``: the SID layout the catalog is for; it decides whether a trailing code is
    FlashRec's end marker (see the module docstring).
    """
    if not isinstance(obj, dict):
        raise CatalogError(f"FlashRec catalog must be a JSON object, got {type(obj).__name__}")
    sid_only = is_sid_only(obj)
    builder = TableBuilder("flashrec", max_items=max_items)
    for pos, (key, value) in enumerate(obj.items(), start=1):
        where = f"key {key!r}"
        if sid_only:
            codes = _sid_codes(key, where, None, layout)
            builder.add(sid_item_id(codes), codes, where, pos)
            continue
        items = value if isinstance(value, list) else [value]
        if not items:
            raise CatalogError(f"{where}: empty item list")
        ids = [_item_id(v, where) for v in items]
        codes = _sid_codes(key, where, ids[0], layout)
        for item_id in ids:
            builder.add(item_id, codes, where, pos)
    return builder.finish()


def _sid_codes(key: str, where: str, item_id: str | None, layout: SidLayout | None) -> list[int]:
    codes = codes_from_texts(key.split(","), where, item_id or key)
    if layout is None or len(codes) != layout.depth + 1:
        return codes
    depth = layout.depth
    if layout.end_token_id is None:
        raise CatalogError(
            f"{where}: SID has {len(codes)} codes, but the SID layout has {depth} levels and no "
            f"end token, so the last code cannot be FlashRec's <|sid_end|> marker"
        )
    if codes[-1] != END_MARKER_CODE:
        raise CatalogError(
            f"{where}: SID has {len(codes)} codes, but the SID layout has {depth} levels; a "
            f"code after them must be {END_MARKER_CODE} (FlashRec's <|sid_end|> marker), got "
            f"{codes[-1]}"
        )
    return codes[:-1]


def _item_id(value: Any, where: str) -> str:
    if isinstance(value, (list, dict)):
        raise CatalogError(f"{where}: item id must be an integer or a string, got {value!r:.80}")
    return item_id_from_value(value, where)
