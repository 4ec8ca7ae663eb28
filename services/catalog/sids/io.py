"""Inputs and output of ``widebeam catalog build-sids``: embeddings + item ids in, JSONL out.

Inputs:
- ``.npy``: a 2-D float array ``[items, dim]``; ids from ``--ids FILE`` (UTF-8 text, one id per
  line) or, without it, the row numbers ``0..N-1``.
- ``.parquet``: an id column (``--ids NAME``, default ``item_id``) and the embedding either as
  one list column (``--column NAME``, default: ``embedding`` or the only list column) or as
  numeric columns ``emb_0..emb_{D-1}``.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO

import numpy as np

_EMB_COL = re.compile(r"emb_(0|[1-9][0-9]*)")


def load_embeddings(
    path: str | Path, ids: str | None = None, column: str | None = None
) -> tuple[list[str], np.ndarray]:  # (N ids, [N, D] float32)
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"embeddings file {file} does not exist")
    suffix = file.suffix.lower()
    if suffix == ".npy":
        if column is not None:
            raise ValueError("--column applies to Parquet input only")
        item_ids, emb = _load_npy(file, ids)
    elif suffix in (".parquet", ".pq"):
        item_ids, emb = _load_parquet(file, ids or "item_id", column)
    else:
        raise ValueError(f"{file}: unsupported embeddings file type {suffix!r} (.npy or .parquet)")
    _check_ids(item_ids)
    return item_ids, emb


def _load_npy(file: Path, ids: str | None) -> tuple[list[str], np.ndarray]:
    try:
        emb = np.load(file, allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise ValueError(f"{file}: not a readable .npy array: {exc}") from None
    if emb.ndim != 2:
        raise ValueError(f"{file}: expected a 2-D [items, dim] array, got shape {emb.shape}")
    if ids is None:
        return [str(i) for i in range(emb.shape[0])], emb
    lines = Path(ids).read_text(encoding="utf-8").splitlines()
    while lines and not lines[-1].strip():
        lines.pop()  # a trailing newline is not an item
    if len(lines) != emb.shape[0]:
        raise ValueError(f"{ids}: {len(lines)} ids for {emb.shape[0]} embedding rows")
    return [line.strip() for line in lines], emb


def _load_parquet(file: Path, id_col: str, column: str | None) -> tuple[list[str], np.ndarray]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(file)
    except (pa.ArrowException, OSError) as exc:
        raise ValueError(f"{file}: not a readable Parquet file: {exc}") from None
    names = table.column_names
    if id_col not in names:
        raise ValueError(f"{file}: no id column {id_col!r} (columns: {names[:20]}); use --ids")
    ids_arr = table.column(id_col)
    if ids_arr.null_count:
        raise ValueError(f"{file}: id column {id_col!r} has {ids_arr.null_count} null(s)")
    item_ids = [str(v) for v in ids_arr.to_pylist()]
    lists = [n for n in names if _is_list(table.schema.field(n).type)]
    if column is None and "embedding" in lists:
        column = "embedding"
    elif column is None and len(lists) == 1:
        column = lists[0]
    if column is not None:
        if column not in names:
            raise ValueError(f"{file}: no embedding column {column!r} (columns: {names[:20]})")
        return item_ids, _list_column(table.column(column), column, file)
    dims = sorted((int(m.group(1)), n) for n in names if (m := _EMB_COL.fullmatch(n)))
    if not dims:
        raise ValueError(
            f"{file}: no embedding found: give --column NAME (a list column; list columns: "
            f"{lists}) or columns emb_0..emb_D-1"
        )
    if [d for d, _ in dims] != list(range(len(dims))):
        raise ValueError(f"{file}: embedding columns {[n for _, n in dims]} are not emb_0..emb_D-1")
    cols = []
    for _, name in dims:
        col = table.column(name)
        if col.null_count or (
            not pa.types.is_floating(col.type) and not pa.types.is_integer(col.type)
        ):
            raise ValueError(f"{file}: column {name!r} must be numeric without nulls")
        cols.append(col.to_numpy())
    return item_ids, np.stack(cols, axis=1)


def _is_list(t: object) -> bool:
    import pyarrow as pa

    return bool(pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t))


def _list_column(col: object, name: str, file: Path) -> np.ndarray:  # -> [N, D]
    import pyarrow as pa
    import pyarrow.compute as pc

    arr = col.combine_chunks()  # type: ignore[attr-defined]
    if not _is_list(arr.type):
        raise ValueError(f"{file}: column {name!r} has type {arr.type}; need a list of floats")
    if arr.null_count:
        raise ValueError(f"{file}: column {name!r} has {arr.null_count} null embedding(s)")
    lengths = pc.list_value_length(arr).to_numpy(zero_copy_only=False)
    if len(lengths) and (lengths.min() != lengths.max() or lengths[0] == 0):
        raise ValueError(
            f"{file}: column {name!r}: embeddings have lengths {lengths.min()}..{lengths.max()}; "
            "all must have the same non-zero length"
        )
    values = pc.list_flatten(arr)
    if values.null_count or not (
        pa.types.is_floating(values.type) or pa.types.is_integer(values.type)
    ):
        raise ValueError(f"{file}: column {name!r} must hold numbers without nulls")
    return values.to_numpy(zero_copy_only=False).reshape(len(arr), -1)


def _check_ids(item_ids: Sequence[str]) -> None:
    empty = [i for i, v in enumerate(item_ids) if not v.strip()]
    if empty:
        raise ValueError(f"empty item ids at rows {empty[:10]}")
    if len(set(item_ids)) != len(item_ids):
        seen: set[str] = set()
        dup = next(v for v in item_ids if v in seen or seen.add(v))  # type: ignore[func-returns-value]
        raise ValueError(f"item id {dup!r} appears more than once")


def write_catalog_jsonl(
    out: IO[str],
    item_ids: Sequence[str],
    codes: np.ndarray,  # codes [N, L] int64
) -> None:
    """Native JSONL catalog lines ``{"item_id": ..., "sid": [...]}`` in input order."""
    for item, sid in zip(item_ids, codes.tolist(), strict=True):
        out.write(json.dumps({"item_id": item, "sid": sid}) + "\n")


def open_output(path: str) -> IO[str]:
    return sys.stdout if path == "-" else open(path, "w", encoding="utf-8")
