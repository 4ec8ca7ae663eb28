"""Catalog files as the peers' own tools write them, byte for byte (test helper; our code).

* :func:`openonerec_sid2pid`: OpenOneRec's ``sid2pid.json`` / ``sid2iid.json``. Its writer is not
  in the repository; the shape is what RecIF-Bench reads (``load_pid_mapping`` and
  ``encode_sid`` in ``benchmarks/benchmark/tasks/v1_0/recommendation/utils_by_pid.py`` of
  Kuaishou-OneRec/OpenOneRec): a Python ``json.dump`` of ``{packed: [{"pid" | "iid", "count",
  "count_after_downsample"}, ...]}``, keys packed with base 8192, entries most popular first.
* :func:`flashrec_vocab`: FlashRec's ``--sid-vocab-file`` as its converter writes it from such a
  file (``python/flashrec/catalog.py`` of sohu-mptc/FlashRec, ``flashrec --catalog`` /
  ``scripts/convert_recif_catalog.py``): the distinct SIDs in ascending code order, each key its
  codes joined by ``,`` plus ``,1`` (the ``<|sid_end|>`` level) unless ``--levels 3``, every value
  ``1``, no whitespace and no trailing newline.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from tests.services.catalog.formats.catalog_writers import Row

RECIF_BASE = 8192  # OpenOneRec packs every SID with this base, whatever the codebook
SID_END_CODE = 1  # FlashRec's code for <|sid_end|> in its extra last level


def recif_pack(sid: Sequence[int], base: int = RECIF_BASE) -> int:
    a, b, c = sid
    return a * base * base + b * base + c


def recif_unpack(packed: int, base: int = RECIF_BASE) -> tuple[int, int, int]:
    a, rest = divmod(packed, base * base)
    b, c = divmod(rest, base)
    return a, b, c


def openonerec_sid2pid(rows: Sequence[Row], id_key: str = "pid") -> bytes:
    """``id_key`` "pid" for sid2pid.json (videos), "iid" for sid2iid.json (products)."""
    groups: dict[str, list[dict[str, int | str]]] = {}
    for item, sid, popularity, _ in rows:
        entry = {id_key: int(item) if item.isdigit() else item, "count": int(popularity),
                 "count_after_downsample": int(popularity) // 2}  # fmt: skip
        groups.setdefault(str(recif_pack(sid)), []).append(entry)
    for entries in groups.values():
        entries.sort(key=lambda e: -int(e["count"]))  # stable: ties keep row order
    return json.dumps(groups).encode()


def flashrec_vocab(sid2pid: bytes, levels: int = 4) -> bytes:
    """The converter's output for an OpenOneRec mapping (its default is 4 levels)."""
    sids = sorted({recif_unpack(int(key)) for key in json.loads(sid2pid)})
    tail = (SID_END_CODE,) if levels == 4 else ()
    keys = (",".join(map(str, (*sid, *tail))) for sid in sids)
    return ("{" + ",".join(f'"{key}":1' for key in keys) + "}").encode()
