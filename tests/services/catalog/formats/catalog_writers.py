"""One logical catalog written in every supported input format (test helper).

Every writer takes ``rows`` (default :data:`ROWS`) so other tests can write their own catalog.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from widebeam.services.catalog.sid_layout import SidLayout, SidLevel

C = 16  # codebook size per level; SIDs below use a first-level code >= C/8 so C is inferable
LAYOUT = SidLayout((SidLevel(100, C), SidLevel(100 + C, C), SidLevel(100 + 2 * C, C)), 98, 99)

# (item_id, sid, popularity, title). Items 11/12/13 share SID (15, 0, 7) with popularity order
# 12 > 13 = 11, so the artifact order is 12, 11, 13 (tie keeps input order).
Row = tuple[str, tuple[int, ...], float, str]
ROWS: list[Row] = [
    ("11", (15, 0, 7), 3.0, "lamp"),
    ("12", (15, 0, 7), 9.0, "desk"),
    ("sku-7", (0, 1, 2), 1.0, "chair, blue"),
    ("13", (15, 0, 7), 3.0, "rug"),
    ("20", (3, 9, 9), 0.0, "mug"),
    ("21", (3, 9, 10), 5.0, 'sofa "xl"'),
]


def jsonl(levels: bool = False, rows: Sequence[Row] = ROWS) -> bytes:
    lines = []
    for item, sid, pop, title in rows:
        rec: dict[str, Any] = {"item_id": item, "popularity": pop, "title": title}
        if levels:
            rec.update({f"sid_{i}": c for i, c in enumerate(sid)})
        else:
            rec["sid"] = list(sid)
        lines.append(json.dumps(rec))
    return ("\n".join(lines) + "\n").encode()


def csv_bytes(style: str = "comma", rows: Sequence[Row] = ROWS) -> bytes:
    """style: 'comma' / 'semicolon' / 'space' / 'json' (one sid field) or 'levels' (sid_k)."""
    out = io.StringIO()
    w = csv.writer(out)
    levels = style == "levels"
    w.writerow(["item_id", *(["sid_0", "sid_1", "sid_2"] if levels else ["sid"]), "popularity",
                "title"])  # fmt: skip
    sep = {"comma": ",", "semicolon": ";", "space": " "}.get(style)
    for item, sid, pop, title in rows:
        if levels:
            sid_cells = [str(c) for c in sid]
        else:
            sid_cells = [json.dumps(list(sid)) if sep is None else sep.join(map(str, sid))]
        w.writerow([item, *sid_cells, pop, title])
    return out.getvalue().encode()


def parquet(levels: bool = False, rows: Sequence[Row] = ROWS) -> bytes:
    cols: dict[str, Any] = {"item_id": [r[0] for r in rows]}
    if levels:
        for i in range(3):
            cols[f"sid_{i}"] = pa.array([r[1][i] for r in rows], pa.int32())
    else:
        cols["sid"] = pa.array([list(r[1]) for r in rows], pa.list_(pa.int64()))
    cols["popularity"] = [r[2] for r in rows]
    cols["title"] = [r[3] for r in rows]
    buf = io.BytesIO()
    pq.write_table(pa.table(cols), buf, row_group_size=2)  # several row groups / batches
    return buf.getvalue()


def _by_sid(rows: Sequence[Row]) -> dict[tuple[int, ...], list[str]]:
    groups: dict[tuple[int, ...], list[str]] = {}
    for item, sid, _, _ in rows:
        groups.setdefault(sid, []).append(item)
    return groups


def _id(item: str) -> int | str:
    return int(item) if item.isdigit() else item


def flashrec(rows: Sequence[Row] = ROWS) -> bytes:
    obj = {}
    for sid, items in _by_sid(rows).items():
        ids = [_id(i) for i in items]
        obj[",".join(map(str, sid))] = ids if len(ids) > 1 else ids[0]
    return json.dumps(obj).encode()


def pack(sid: tuple[int, ...], c: int = C) -> int:
    return (sid[0] * c + sid[1]) * c + sid[2]


def sid2pid(indent: int | None = None, rows: Sequence[Row] = ROWS) -> bytes:
    obj: dict[str, list[dict[str, Any]]] = {}
    for item, sid, pop, title in rows:
        obj.setdefault(str(pack(sid)), []).append({"pid": _id(item), "count": pop, "title": title})
    return json.dumps(obj, indent=indent).encode()


ALL_FORMATS: dict[str, tuple[str, bytes]] = {
    # case name -> (expected detected format, content)
    "jsonl": ("jsonl", jsonl()),
    "jsonl-levels": ("jsonl", jsonl(levels=True)),
    "csv-comma": ("csv", csv_bytes("comma")),
    "csv-semicolon": ("csv", csv_bytes("semicolon")),
    "csv-space": ("csv", csv_bytes("space")),
    "csv-json": ("csv", csv_bytes("json")),
    "csv-levels": ("csv", csv_bytes("levels")),
    "parquet": ("parquet", parquet()),
    "parquet-levels": ("parquet", parquet(levels=True)),
    "flashrec": ("flashrec", flashrec()),
    "sid2pid": ("sid2pid", sid2pid()),
    "sid2pid-pretty": ("sid2pid", sid2pid(indent=2)),
}


def gz(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)
