"""The JSONL catalog's fast path: a chunk of whole lines parsed by pyarrow's JSON reader.

It only takes a chunk whose every line is a plain row — one object with ``item_id`` (string),
``sid`` (list of integers) and optionally ``popularity`` (number), nothing else, no blank or
indented lines, no lone carriage returns, valid UTF-8 — and checks every value as the row-by-row
parser would. Anything else (metadata keys, per-level ``sid_0`` keys, integer ids, a bad value,
a line longer than a parser block) returns None, and the chunk goes through the row-by-row
parser, which names the line at fault with the same message as ever. So the fast path changes
speed, never what is accepted or how a rejection reads.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from widebeam.services.catalog.formats.values import MAX_CODE, item_id_from_value
from widebeam.services.catalog.types import CatalogError

_SCHEMA = pa.schema(
    [("item_id", pa.string()), ("sid", pa.list_(pa.int64())), ("popularity", pa.float64())]
)
_PARSE = pj.ParseOptions(
    explicit_schema=_SCHEMA, unexpected_field_behavior="error", newlines_in_values=False
)
BLOCK_BYTES = 8 << 20  # lines longer than this take the row-by-row path
# A line that starts with whitespace (or is blank) is legal but rare: the row-by-row parser
# handles it, so the fast path never has to tell blank lines from rows.
_NL, _CR = 0x0A, 0x0D
_LINE_START_BYTES_TO_AVOID = np.array([0x0A, 0x20, 0x09, 0x0D], dtype=np.uint8)
_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True)
class Rows:
    item_ids: list[str]  # [n]
    codes: np.ndarray  # [n, L] int64
    popularity: np.ndarray  # [n] float64


def parse_chunk(chunk: bytes) -> Rows | None:
    """The rows of ``chunk`` (whole lines, one row each), or None: take the row-by-row path."""
    lines = _plain_lines(chunk)
    if not lines:
        return None
    try:
        table = pj.read_json(
            pa.BufferReader(chunk),
            read_options=pj.ReadOptions(use_threads=True, block_size=BLOCK_BYTES),
            parse_options=_PARSE,
        )
    except pa.ArrowException:
        return None
    if table.num_rows != lines:  # two objects on one line
        return None
    ids = _item_ids(table.column("item_id").combine_chunks())
    codes = _codes(table.column("sid").combine_chunks())
    popularity = _popularity(table.column("popularity").combine_chunks())
    if ids is None or codes is None or popularity is None:
        return None
    return Rows(ids, codes, popularity)


def _plain_lines(chunk: bytes) -> int:
    """Number of lines when every line of ``chunk`` starts with a non-blank byte, ends with
    "\n" or "\r\n" (or the chunk's end) and the chunk is UTF-8; else 0."""
    if not chunk or chunk[:1] in b" \t\r\n":
        return 0
    text = np.frombuffer(chunk, dtype=np.uint8)  # [bytes] uint8
    line_ends = np.flatnonzero(text == _NL)  # [lines] int64
    after = line_ends[line_ends < len(text) - 1] + 1  # first byte of every line but the first
    if np.isin(text[after], _LINE_START_BYTES_TO_AVOID).any():
        return 0
    carriages = np.flatnonzero(text == _CR)
    if len(carriages) and (carriages[-1] == len(text) - 1 or (text[carriages + 1] != _NL).any()):
        return 0  # a lone "\r" ends a line for the row-by-row reader, not for Arrow
    if not chunk.isascii():
        if _BOM in chunk:
            return 0
        try:
            chunk.decode("utf-8")  # Arrow does not check the UTF-8 of string values
        except UnicodeDecodeError:
            return 0
    return int(len(line_ends) + (text[-1] != _NL))


def _item_ids(col: pa.Array) -> list[str] | None:
    if col.null_count:
        return None
    offsets = np.frombuffer(col.buffers()[1], np.int32, len(col) + 1, col.offset * 4)
    data = np.frombuffer(col.buffers()[2], np.uint8) if col.buffers()[2] else np.zeros(0, np.uint8)
    lengths = np.diff(offsets)
    if (lengths == 0).any():
        return None
    # Only an id whose first byte is whitespace / control or non-ASCII can be blank or hold a
    # character the row parser rejects: those few are checked by it.
    first = data[offsets[:-1]]
    ids = col.to_pylist()
    for i in np.flatnonzero((first <= 0x20) | (first >= 0x7F)).tolist():
        try:
            item_id_from_value(ids[i], "")
        except CatalogError:
            return None
    return ids


def _codes(col: pa.Array) -> np.ndarray | None:
    if col.null_count or not len(col):
        return None
    lengths = pc.list_value_length(col).to_numpy(zero_copy_only=False)
    depth = int(lengths[0])
    if depth == 0 or (lengths != depth).any():
        return None
    values = col.flatten()
    if values.null_count:
        return None
    codes = values.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    if len(codes) and (codes.min() < 0 or codes.max() > MAX_CODE):
        return None
    return codes.reshape(-1, depth)


def _popularity(col: pa.Array) -> np.ndarray | None:
    values = pc.fill_null(col, 0.0).to_numpy(zero_copy_only=False).astype(np.float64)
    if not np.isfinite(values).all():
        return None
    return values + 0.0  # -0.0 (JSON "-0") reads as 0.0, as the row parser's int 0 does
