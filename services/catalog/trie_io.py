"""Trie <-> flat numpy arrays (the publishable artifact) and the trie's content hash."""

from __future__ import annotations

import hashlib

import numpy as np

from widebeam.services.catalog.sid_layout import SidLayout, SidLevel
from widebeam.services.catalog.string_table import (  # noqa: F401 (re-exported)
    StringTable,
    decode_strings,
    encode_strings,
)

ARTIFACT_FORMAT_VERSION = 1

# name -> dtype of the trie's structural arrays, in SidTrie constructor order.
TRIE_FIELDS: dict[str, type] = {
    "depth_offsets": np.int64,
    "child_offsets": np.int64,
    "child_tokens": np.int32,
    "child_nodes": np.int32,
    "leaf_sid": np.int32,
    "sids": np.int32,
    "sid_item_offsets": np.int64,
}


def pack_arrays(
    layout: SidLayout,
    depth_offsets: np.ndarray,
    child_offsets: np.ndarray,
    child_tokens: np.ndarray,
    child_nodes: np.ndarray,
    leaf_sid: np.ndarray,
    sids: np.ndarray,
    sid_item_offsets: np.ndarray,
    item_ids: StringTable,
) -> dict[str, np.ndarray]:
    # Layout travels as arrays so the artifact is a plain name -> ndarray mapping; -1 = absent.
    specials = [layout.begin_token_id, layout.end_token_id]
    blob, offsets = item_ids.blob, item_ids.offsets
    return {
        "format_version": np.array([ARTIFACT_FORMAT_VERSION], dtype=np.int64),
        "layout_levels": np.array([[lv.base, lv.size] for lv in layout.levels], dtype=np.int64),
        "layout_special": np.array([-1 if t is None else t for t in specials], dtype=np.int64),
        "depth_offsets": depth_offsets,
        "child_offsets": child_offsets,
        "child_tokens": child_tokens,
        "child_nodes": child_nodes,
        "leaf_sid": leaf_sid,
        "sids": sids,
        "sid_item_offsets": sid_item_offsets,
        "item_id_bytes": blob,
        "item_id_offsets": offsets,
    }


def unpack_arrays(
    arrays: dict[str, np.ndarray], copy: bool = True
) -> tuple[SidLayout, list[np.ndarray], StringTable]:
    """(layout, structural arrays in TRIE_FIELDS order, item ids); ValueError when inconsistent,
    UnicodeDecodeError when an id is not UTF-8.

    ``copy=False`` lets the trie keep views of ``arrays`` (for buffers nothing else holds, such
    as a freshly decoded artifact): no second copy of the catalog while it loads."""
    version = int(np.asarray(arrays["format_version"]).reshape(-1)[0])
    if version != ARTIFACT_FORMAT_VERSION:
        raise ValueError(f"unsupported trie artifact format version {version}")
    levels = np.asarray(arrays["layout_levels"]).reshape(-1, 2).tolist()
    begin, end = (None if t < 0 else t for t in np.asarray(arrays["layout_special"]).tolist())
    layout = SidLayout(tuple(SidLevel(b, s) for b, s in levels), begin, end)

    # Copies by default: the trie marks its arrays read-only and must not alias the caller's.
    # Views of a decoded artifact sit where its header put them, often not on their item
    # size: numpy's loops over unaligned arrays run 2-3x slower, so then all are copied
    # (not some: a few views would keep the whole decoded buffer alive beside the copies).
    names = {**TRIE_FIELDS, "item_id_bytes": np.uint8, "item_id_offsets": np.int64}
    copy = copy or not all(np.asarray(arrays[name]).flags.aligned for name in names)

    def field(name: str, dtype: type) -> np.ndarray:
        return np.array(arrays[name], dtype=dtype, copy=copy or None)

    fields = [field(name, dt) for name, dt in TRIE_FIELDS.items()]
    depth_offsets, child_offsets, child_tokens, child_nodes, leaf_sid, sids, sid_offsets = fields
    item_ids = StringTable(field("item_id_bytes", np.uint8), field("item_id_offsets", np.int64))
    item_ids.check_utf8()
    num_nodes = len(leaf_sid)
    checks = [
        (len(depth_offsets) == layout.path_length(True) + 2, "depth_offsets length"),
        (int(depth_offsets[-1]) == num_nodes, "depth_offsets total"),
        (len(child_offsets) == num_nodes + 1, "child_offsets length"),
        (int(child_offsets[-1]) == len(child_tokens) == len(child_nodes), "edge count"),
        (sids.ndim == 2 and sids.shape[1] == layout.depth, "sids shape"),
        (len(sid_offsets) == len(sids) + 1, "sid_item_offsets length"),
        (int(sid_offsets[-1]) == len(item_ids), "item count"),
    ]
    for ok, what in checks:
        if not ok:
            raise ValueError(f"inconsistent trie arrays: {what}")
    return layout, fields, item_ids


def content_hash(
    layout: SidLayout, sids: np.ndarray, sid_item_offsets: np.ndarray, item_ids: StringTable
) -> str:
    """sha256 over layout + sorted SIDs + items per SID (sorted, so input order is irrelevant).

    The node/edge arrays are a pure function of (layout, sids), so they need not be hashed.
    """
    canonical = canonical_item_ids(sid_item_offsets, item_ids)
    h = hashlib.sha256()
    h.update(f"widebeam-sid-trie/v{ARTIFACT_FORMAT_VERSION}\0{layout.to_spec()}\0".encode())
    for arr in (
        np.ascontiguousarray(sids, dtype="<i4"),
        np.ascontiguousarray(sid_item_offsets, dtype="<i8"),
        np.ascontiguousarray(canonical.offsets, dtype="<i8"),
        canonical.blob,
    ):
        h.update(memoryview(arr).cast("B"))
    return h.hexdigest()


_SORT_WIDTH_LIMIT = 64  # longest id (bytes) sorted as fixed-width numpy words


def canonical_item_ids(sid_item_offsets: np.ndarray, item_ids: StringTable) -> StringTable:
    """``item_ids`` with the items of each SID sorted (Python string order, which is UTF-8 byte
    order); ``item_ids`` itself when they already are.

    Only SIDs shared by several items need re-ordering, and only their bytes move. Most shared
    SIDs have two items: those are compared pairwise, 8 bytes at a time; larger groups are
    sorted together (lexsort over fixed-width words, or in Python when an id is long)."""
    sizes = np.diff(sid_item_offsets)
    pairs = sid_item_offsets[:-1][sizes == 2]  # [p] int64 first item of each 2-item SID
    swap = _sorts_before(item_ids, pairs + 1, pairs)  # [p] bool: the second id goes first
    moved = [pairs[swap], pairs[swap] + 1]  # positions whose id changes ...
    source = [pairs[swap] + 1, pairs[swap]]  # ... and the position it comes from
    many = np.flatnonzero(sizes > 2)
    if many.size:
        members = _spans(sid_item_offsets[many], sizes[many])
        ranked = _sorted_groups(item_ids, sid_item_offsets, many, members)
        # a larger SID with any change is rewritten whole: its other ids may shift in bytes
        group = np.repeat(np.arange(len(many)), sizes[many])
        changed = np.zeros(len(many), dtype=bool)
        changed[group[ranked != members]] = True
        rewrite = changed[group]
        moved.append(members[rewrite])
        source.append(ranked[rewrite])
    moved_at, moved_from = np.concatenate(moved), np.concatenate(source)
    if not moved_at.size:
        return item_ids
    lengths = np.diff(item_ids.offsets)
    source_lengths = lengths[moved_from]
    lengths[moved_at] = source_lengths
    offsets = np.zeros(len(item_ids) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    blob = item_ids.blob.copy()
    blob[_spans(offsets[moved_at], source_lengths)] = item_ids.blob[
        _spans(item_ids.offsets[moved_from], source_lengths)
    ]
    return StringTable(blob, offsets)


def _sorts_before(table: StringTable, x: np.ndarray, y: np.ndarray) -> np.ndarray:  # [k] bool
    """Per pair: whether id ``x[i]`` sorts before id ``y[i]`` (bytes, shorter prefix first).

    Compared as big-endian 8-byte words of NUL-padded bytes, one word per round for the pairs
    still equal; when one id ends inside an equal word it is a prefix of the other."""
    result = np.zeros(len(x), dtype=bool)
    open_ = np.arange(len(x))
    x_start, y_start = table.offsets[x], table.offsets[y]
    x_len, y_len = table.offsets[x + 1] - x_start, table.offsets[y + 1] - y_start
    at = 0
    while open_.size:
        wx = _words(table.blob, x_start[open_] + at, x_len[open_] - at)
        wy = _words(table.blob, y_start[open_] + at, y_len[open_] - at)
        result[open_[wx < wy]] = True
        equal = open_[wx == wy]
        at += 8
        ended = (x_len[equal] <= at) | (y_len[equal] <= at)
        result[equal[ended]] = x_len[equal[ended]] < y_len[equal[ended]]
        open_ = equal[~ended]
    return result


def _words(blob: np.ndarray, starts: np.ndarray, left: np.ndarray) -> np.ndarray:  # [k] uint64
    """The 8 bytes at each start (NULs past ``left`` bytes) as big-endian integers."""
    lane = np.arange(8)
    inside = lane < left[:, None]  # [k, 8] bool
    where = np.where(inside, starts[:, None] + lane, 0)
    return np.where(inside, blob[where], 0).astype(np.uint8).view(">u8").reshape(-1)


def _sorted_groups(
    table: StringTable, sid_item_offsets: np.ndarray, groups: np.ndarray, members: np.ndarray
) -> np.ndarray:  # [m] int64: each group's members in sorted order
    starts = table.offsets[members]
    lengths = table.offsets[members + 1] - starts
    width = int(lengths.max())
    if width > _SORT_WIDTH_LIMIT:  # a long id: sort per SID in Python (rare)
        out = []
        for sid in groups.tolist():
            lo, hi = int(sid_item_offsets[sid]), int(sid_item_offsets[sid + 1])
            out.extend(lo + i for i in sorted(range(hi - lo), key=table[lo:hi].__getitem__))
        return np.asarray(out, dtype=np.int64)
    # Big-endian 8-byte words of the NUL-padded bytes compare as the bytes do; a tie (one id a
    # prefix of the other, the rest NULs) goes to the shorter, as in Python.
    words = -(-max(width, 1) // 8)
    keys = np.stack([_words(table.blob, starts + 8 * w, lengths - 8 * w) for w in range(words)])
    group = np.repeat(np.arange(len(groups)), np.diff(sid_item_offsets)[groups])
    return members[np.lexsort((lengths, *keys[::-1], group))]


def _spans(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:  # [sum(lengths)] int64
    """starts[0] .. starts[0]+lengths[0]-1, then starts[1] ..: the ranges laid end to end."""
    ends = np.cumsum(lengths)
    total = int(ends[-1]) if len(ends) else 0
    return np.repeat(starts - (ends - lengths), lengths) + np.arange(total)
