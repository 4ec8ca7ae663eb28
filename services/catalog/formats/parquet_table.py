"""Parquet catalogs (pyarrow), read in record batches so memory stays bounded by the output.

Columns: ``item_id`` (string or integer); the SID as a list-of-integer column ``sid`` or integer
columns ``sid_0..sid_{L-1}``; optional numeric ``popularity`` (null = 0); every other column is
metadata. Float or boolean code columns are rejected even when the values look integral.
Row numbers in errors are 1-based.
"""

from __future__ import annotations

import os
import re
from typing import IO, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from widebeam.services.catalog.formats.table import CatalogTable
from widebeam.services.catalog.formats.values import MAX_CODE
from widebeam.services.catalog.types import CatalogError

_LEVEL_COL = re.compile(r"sid_(0|[1-9][0-9]{0,5})")
DEFAULT_BATCH_ROWS = 1 << 16


def parse_parquet(
    source: str | os.PathLike[str] | IO[bytes],
    batch_rows: int = DEFAULT_BATCH_ROWS,
    max_items: int | None = None,
) -> CatalogTable:
    """Parse a Parquet catalog from a path or a seekable binary stream."""
    try:
        pf = pq.ParquetFile(source)
        rows = pf.metadata.num_rows
        if max_items is not None and rows > max_items:
            raise CatalogError(
                f"the catalog has {rows} rows, more than its limit of {max_items} items"
            )
        return _parse(pf, batch_rows)
    except (pa.ArrowException, OSError) as exc:
        raise CatalogError(f"malformed Parquet: {exc}") from None


def _int_type(t: pa.DataType) -> bool:
    return pa.types.is_integer(t)  # bool is its own Arrow type, so it is excluded here


def _parse(pf: pq.ParquetFile, batch_rows: int) -> CatalogTable:
    schema = pf.schema_arrow
    names = schema.names
    if len(set(names)) != len(names):
        raise CatalogError(f"Parquet schema repeats a column name: {names}")
    if "item_id" not in names:
        raise CatalogError(f"Parquet schema has no 'item_id' column (columns: {names[:20]})")
    item_type = schema.field("item_id").type
    if not (pa.types.is_string(item_type) or pa.types.is_large_string(item_type)
            or _int_type(item_type)):  # fmt: skip
        raise CatalogError(f"Parquet column 'item_id' has type {item_type}; need string or int")
    levels = {int(m.group(1)): n for n in names if (m := _LEVEL_COL.fullmatch(n))}
    if "sid" in names and levels:
        raise CatalogError("Parquet: give the SID as a 'sid' column or 'sid_0'.. columns, not both")
    if "sid" in names:
        t = schema.field("sid").type
        if not (pa.types.is_list(t) or pa.types.is_large_list(t)
                or pa.types.is_fixed_size_list(t)) or not _int_type(t.value_type):  # fmt: skip
            raise CatalogError(f"Parquet column 'sid' has type {t}; need a list of integers")
        sid_cols = ["sid"]
    elif levels:
        sid_cols = []
        for lvl in range(len(levels)):
            if lvl not in levels:
                raise CatalogError(f"Parquet schema has no 'sid_{lvl}' column")
            t = schema.field(levels[lvl]).type
            if not _int_type(t):
                raise CatalogError(f"Parquet column 'sid_{lvl}' has type {t}; need an integer")
            sid_cols.append(levels[lvl])
    else:
        raise CatalogError("Parquet schema has no 'sid' column (nor 'sid_0', 'sid_1', ..)")
    if "popularity" in names:
        t = schema.field("popularity").type
        if not (_int_type(t) or pa.types.is_floating(t)):
            raise CatalogError(f"Parquet column 'popularity' has type {t}; need a number")
    meta_cols = [n for n in names if n not in {"item_id", "popularity", *sid_cols}]

    item_ids: list[str] = []
    sid_blocks: list[np.ndarray] = []  # each [batch, L] int64
    pop_blocks: list[np.ndarray] = []  # each [batch] float64
    metadata: list[dict[str, Any]] = []
    start = 0
    for batch in pf.iter_batches(batch_size=batch_rows):
        item_ids.extend(_item_ids(batch.column("item_id"), start))
        if sid_cols == ["sid"]:
            block = _list_codes(batch.column("sid"), start)
        else:
            cols = [_code_column(batch.column(c), start, lvl) for lvl, c in enumerate(sid_cols)]
            block = np.stack(cols, axis=1) if cols else np.zeros((batch.num_rows, 0), np.int64)
        if sid_blocks and block.shape[1] != sid_blocks[0].shape[1]:
            raise CatalogError(
                f"row {start + 1}: SID has {block.shape[1]} codes, but row 1 has "
                f"{sid_blocks[0].shape[1]} (mixed depths: all SIDs must have the same length)"
            )
        sid_blocks.append(block)
        if "popularity" in names:
            pop = pc.cast(pc.fill_null(batch.column("popularity"), 0), pa.float64())
            pop_blocks.append(pop.to_numpy(zero_copy_only=False))
        else:
            pop_blocks.append(np.zeros(batch.num_rows, dtype=np.float64))
        if meta_cols:
            metadata.extend(batch.select(meta_cols).to_pylist())
        start += batch.num_rows
    depth = sid_blocks[0].shape[1] if sid_blocks else 0
    return CatalogTable(
        item_ids=item_ids,
        sids=np.concatenate(sid_blocks) if sid_blocks else np.zeros((0, depth), np.int64),
        popularity=np.concatenate(pop_blocks) if pop_blocks else np.zeros(0, np.float64),
        metadata=metadata if meta_cols else None,
        format="parquet",
        source_rows=np.arange(1, start + 1, dtype=np.int64),
    )


def _first(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def _item_ids(col: pa.Array, start: int) -> list[str]:
    if col.null_count:
        raise CatalogError(
            f"row {start + _first(col.is_null().to_numpy(False)) + 1}: null 'item_id'"
        )
    if _int_type(col.type):
        return pc.cast(col, pa.string()).to_pylist()
    blank = pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(col)), 0).to_numpy(False)
    if blank.any():
        raise CatalogError(f"row {start + _first(blank) + 1}: 'item_id' is empty")
    return col.to_pylist()


def _list_codes(col: pa.Array, start: int) -> np.ndarray:
    """[batch, L] int64 from a list<int> column; rejects nulls and ragged rows."""
    lengths = pc.list_value_length(col).to_numpy(zero_copy_only=False)  # float, NaN for nulls
    bad = np.isnan(lengths) | (lengths == 0)
    if bad.any():
        raise CatalogError(f"row {start + _first(bad) + 1}: 'sid' is null or empty")
    depth = int(lengths[0])
    ragged = lengths != depth
    if ragged.any():
        i = _first(ragged)
        raise CatalogError(
            f"row {start + i + 1}: SID has {int(lengths[i])} codes, but row {start + 1} has "
            f"{depth} (mixed depths: all SIDs must have the same length)"
        )
    values = col.flatten()  # respects the slice offset of the batch
    if values.null_count:
        row = _first(values.is_null().to_numpy(False)) // depth
        raise CatalogError(f"row {start + row + 1}: 'sid' holds a null code")
    codes = _checked_int64(values, start, depth, "sid")
    return codes.reshape(-1, depth)


def _code_column(col: pa.Array, start: int, lvl: int) -> np.ndarray:
    if col.null_count:
        row = _first(col.is_null().to_numpy(False))
        raise CatalogError(f"row {start + row + 1}: 'sid_{lvl}' is null")
    return _checked_int64(col, start, 1, f"sid_{lvl}")


def _checked_int64(values: pa.Array, start: int, depth: int, name: str) -> np.ndarray:
    """[n] int64 codes; ``depth`` codes per row, for naming the row of a bad value."""
    if pa.types.is_unsigned_integer(values.type):
        too_big = pc.greater(values, MAX_CODE).to_numpy(False)
        codes = None
    else:
        codes = pc.cast(values, pa.int64()).to_numpy(zero_copy_only=False)
        too_big = codes > MAX_CODE
    if too_big.any():
        i = _first(too_big)
        raise CatalogError(
            f"row {start + i // depth + 1}: '{name}' code {values[i].as_py()} at level "
            f"{i % depth if name == 'sid' else name[4:]} is too large (max {MAX_CODE})"
        )
    if codes is None:
        codes = pc.cast(values, pa.int64()).to_numpy(zero_copy_only=False)
    negative = codes < 0
    if negative.any():
        i = _first(negative)
        level = i % depth if name == "sid" else name[4:]
        raise CatalogError(
            f"row {start + i // depth + 1}: '{name}' code {codes[i]} at level {level} is negative"
        )
    return codes
