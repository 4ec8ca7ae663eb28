"""OpenOneRec's ``sid2pid.json`` / ``sid2iid.json``: ``{"<packed>": [{"pid": p, "count": n}]}``.

The shape RecIF-Bench reads (``load_pid_mapping`` and ``encode_sid`` in
``benchmarks/benchmark/tasks/v1_0/recommendation/utils_by_pid.py`` of Kuaishou-OneRec/OpenOneRec):
a key packs a depth-3 SID with a base C, ``packed = a*C^2 + b*C + c`` (OpenOneRec always packs
with C = 8192, its codebook size); each list entry is one item, most popular first: ``pid``
(``sid2pid.json``, videos) or ``iid`` (``sid2iid.json``, products) is the item id (int or string),
``count`` (optional, default 0) its popularity, other keys (``count_after_downsample``, ...)
metadata.

C (:func:`resolve_codebook_size`): an explicit ``codebook_size`` wins. With a SID layout, C is
the one base among the layout's codebook size (when all levels share one) and OpenOneRec's 8192
under which every key unpacks into the layout's codebooks; when neither does, or both do but
disagree about some key, the error names ``codebook_size``. Without a layout, C is the
*smallest power of two* C >= 2 with ``C^3 > max key`` (exact when the codebook is a power of
two and the largest first-level code used is >= C/8).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from widebeam.services.catalog.formats.builder import TableBuilder
from widebeam.services.catalog.formats.table import CatalogTable
from widebeam.services.catalog.formats.values import item_id_from_value, popularity_from_value
from widebeam.services.catalog.sid_layout import SidLayout
from widebeam.services.catalog.types import CatalogError

DEPTH = 3
OPENONEREC_PACKING_BASE = 8192  # utils_by_pid.CODE_MULTIPLIER_2
ITEM_ID_KEYS = ("pid", "iid")  # sid2pid.json, sid2iid.json
_MAX_C = 1 << 21  # C^3 must stay below 2^63 so packed keys fit int64
_BASE_NAMES = {False: "the layout's codebook size", True: "OpenOneRec's packing base"}


def infer_codebook_size(max_key: int) -> int:
    """Smallest power of two C >= 2 with C^3 > max_key (see module doc for when it is exact)."""
    c = 2
    while c**DEPTH <= max_key:
        c *= 2
    return c


def unpack(keys: np.ndarray, c: int) -> np.ndarray:  # keys [K] int64 -> [K, 3] int64
    return np.stack([keys // (c * c), (keys // c) % c, keys % c], axis=1)


def resolve_codebook_size(
    keys: list[int], codebook_size: int | None, layout: SidLayout | None = None
) -> int:
    """The packing base C of ``keys`` (see the module docstring for the rule)."""
    if codebook_size is None:
        if layout is not None and layout.depth == DEPTH:
            codebook_size = _base_from_layout(keys, layout)
        else:
            codebook_size = infer_codebook_size(max(keys, default=0))
    if not 1 <= codebook_size <= _MAX_C:
        raise CatalogError(f"sid2pid codebook size {codebook_size} is outside 1..{_MAX_C}")
    return codebook_size


def _base_from_layout(keys: list[int], layout: SidLayout) -> int:
    sizes = np.array([lv.size for lv in layout.levels], dtype=np.int64)  # [3]
    packed = np.array(keys, dtype=np.int64)  # [K]
    shared = {int(s) for s in sizes.tolist()}
    candidates = sorted({*(shared if len(shared) == 1 else ()), OPENONEREC_PACKING_BASE})
    candidates = [c for c in candidates if c <= _MAX_C]
    fitting: dict[int, np.ndarray] = {}
    misfit: dict[int, int] = {}  # C -> position of the first key that does not fit under C
    for c in candidates:
        codes = unpack(packed, c)  # [K, 3]
        too_big = packed >= c**DEPTH if c**DEPTH < 1 << 63 else np.zeros_like(packed, bool)
        bad = np.flatnonzero(too_big | (codes >= sizes).any(axis=1))
        if bad.size:
            misfit[c] = int(bad[0])
        else:
            fitting[c] = codes
    hint = "pass codebook_size (the C of packed = a*C^2 + b*C + c)"
    if not fitting:
        named = " or ".join(
            f"C={c} ({_BASE_NAMES[c == OPENONEREC_PACKING_BASE]})" for c in candidates
        )
        i = misfit[candidates[0]]
        raise CatalogError(
            f"key '{keys[i]}': packed SID {keys[i]} does not unpack into the SID layout's "
            f"codebooks (sizes {sizes.tolist()}) with {named}; {hint}"
        )
    first, *others = fitting
    for c in others:
        differ = np.flatnonzero((fitting[c] != fitting[first]).any(axis=1))
        if differ.size:
            i = int(differ[0])
            raise CatalogError(
                f"key '{keys[i]}': the packed SIDs unpack into the SID layout's codebooks with "
                f"C={first} and with C={c}, which disagree (this key is "
                f"{fitting[first][i].tolist()} or {fitting[c][i].tolist()}); {hint}"
            )
    return first


def parse_sid2pid(
    obj: dict[str, Any],
    codebook_size: int | None = None,
    layout: SidLayout | None = None,
    max_items: int | None = None,
) -> CatalogTable:
    """Table of a decoded sid2pid / sid2iid object; C from ``codebook_size`` or ``layout``."""
    if not isinstance(obj, dict):
        raise CatalogError(f"sid2pid catalog must be a JSON object, got {type(obj).__name__}")
    # Keys are checked before C is inferred so that a junk key cannot inflate the inference.
    keys = [_packed_key(k) for k in obj]
    c = resolve_codebook_size(keys, codebook_size, layout)
    builder = TableBuilder("sid2pid", codebook_size=c, max_items=max_items)
    for pos, (key, packed, value) in enumerate(zip(obj, keys, obj.values(), strict=True), 1):
        where = f"key {key!r}"
        if packed >= c**DEPTH:
            raise CatalogError(
                f"{where}: packed SID {packed} is >= C^3 = {c**DEPTH} for codebook size C={c}; "
                f"pass codebook_size (the C of packed = a*C^2 + b*C + c)"
            )
        codes = [packed // (c * c), (packed // c) % c, packed % c]
        if not isinstance(value, list) or not value:
            raise CatalogError(f"{where}: value must be a non-empty list of {{'pid': ...}} objects")
        for n, entry in enumerate(value):
            at = f"{where} entry {n}"
            meta = dict(entry) if isinstance(entry, dict) else None
            id_keys = [k for k in ITEM_ID_KEYS if meta is not None and k in meta]
            if meta is None or len(id_keys) != 1:
                raise CatalogError(
                    f"{at}: expected an object with a 'pid' key (sid2pid.json) or an 'iid' key "
                    f"(sid2iid.json), got {entry!r:.80}"
                )
            item_id = item_id_from_value(meta.pop(id_keys[0]), at)
            popularity = popularity_from_value(meta.pop("count", None), at, item_id)
            builder.add(item_id, codes, at, pos, popularity, meta)
    return builder.finish()


def _packed_key(key: str) -> int:
    s = key.strip()
    # At most 19 digits: int() of a huge digit string is slow and cannot be < 2^63 anyway.
    if not (s.isascii() and s.isdigit() and len(s) <= 19) or int(s) >= 1 << 63:
        raise CatalogError(f"key {key!r}: expected a packed SID (a non-negative integer < 2^63)")
    return int(s)
