"""Trie <-> flat numpy arrays (the publishable artifact) and the trie's content hash."""

from __future__ import annotations

import hashlib
import itertools

import numpy as np

from widebeam.services.catalog.sid_layout import SidLayout, SidLevel

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


_SEPARATOR = 0x0A  # "\n": never part of a multi-byte UTF-8 sequence


def encode_strings(strings: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """UTF-8 blob (uint8) + [n+1] int64 byte offsets; safe for ids holding any character.

    Encoded as one newline-joined string, then split with numpy (no per-string Python work);
    strings that hold a newline themselves take the per-string path.
    """
    joined = np.frombuffer("\n".join(strings).encode("utf-8"), dtype=np.uint8)  # [bytes] uint8
    is_separator = joined == _SEPARATOR
    separators = np.flatnonzero(is_separator)  # [n-1] int64 when no string holds a newline
    if len(separators) != max(len(strings) - 1, 0):
        return _encode_each(strings)
    offsets = np.zeros(len(strings) + 1, dtype=np.int64)
    if strings:
        # string i ends at separator i in `joined`, i.e. i bytes earlier in the blob
        offsets[1:-1] = separators - np.arange(len(separators))
        offsets[-1] = len(joined) - len(separators)
    return joined[~is_separator], offsets


def _encode_each(strings: list[str]) -> tuple[np.ndarray, np.ndarray]:
    encoded = [s.encode("utf-8") for s in strings]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)), out=offsets[1:])
    blob = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    return blob, offsets


def decode_strings(blob: np.ndarray, offsets: np.ndarray) -> list[str]:
    """Inverse of :func:`encode_strings`; UnicodeDecodeError when a string is not UTF-8.

    Decoded in one piece with a newline put between the strings and split at them; a blob that
    holds a newline itself takes the per-string path.
    """
    blob = np.ascontiguousarray(blob, dtype=np.uint8)
    n = len(offsets) - 1
    if n <= 0:
        return []
    offsets = np.asarray(offsets, dtype=np.int64)
    well_formed = offsets[0] == 0 and offsets[-1] == len(blob) and (np.diff(offsets) >= 0).all()
    if not well_formed or (blob == _SEPARATOR).any():
        raw = blob.tobytes()
        return [raw[a:b].decode("utf-8") for a, b in itertools.pairwise(offsets.tolist())]
    # byte j of string i lands at offsets[i] + i + j: after the i separators before it
    keep = np.ones(len(blob) + n - 1, dtype=bool)
    keep[offsets[1:-1] + np.arange(n - 1)] = False
    with_separators = np.full(len(keep), _SEPARATOR, dtype=np.uint8)
    with_separators[keep] = blob
    del keep
    return with_separators.tobytes().decode("utf-8").split("\n")


def pack_arrays(
    layout: SidLayout,
    depth_offsets: np.ndarray,
    child_offsets: np.ndarray,
    child_tokens: np.ndarray,
    child_nodes: np.ndarray,
    leaf_sid: np.ndarray,
    sids: np.ndarray,
    sid_item_offsets: np.ndarray,
    item_ids: list[str],
) -> dict[str, np.ndarray]:
    # Layout travels as arrays so the artifact is a plain name -> ndarray mapping; -1 = absent.
    specials = [layout.begin_token_id, layout.end_token_id]
    blob, offsets = encode_strings(item_ids)
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
    arrays: dict[str, np.ndarray],
) -> tuple[SidLayout, list[np.ndarray], list[str]]:
    """(layout, structural arrays in TRIE_FIELDS order, item ids); ValueError when inconsistent."""
    version = int(np.asarray(arrays["format_version"]).reshape(-1)[0])
    if version != ARTIFACT_FORMAT_VERSION:
        raise ValueError(f"unsupported trie artifact format version {version}")
    levels = np.asarray(arrays["layout_levels"]).reshape(-1, 2).tolist()
    begin, end = (None if t < 0 else t for t in np.asarray(arrays["layout_special"]).tolist())
    layout = SidLayout(tuple(SidLevel(b, s) for b, s in levels), begin, end)
    # Copies: the trie marks its arrays read-only and must not alias the caller's buffers.
    fields = [np.array(arrays[name], dtype=dt, copy=True) for name, dt in TRIE_FIELDS.items()]
    depth_offsets, child_offsets, child_tokens, child_nodes, leaf_sid, sids, sid_offsets = fields
    item_ids = decode_strings(arrays["item_id_bytes"], np.asarray(arrays["item_id_offsets"]))
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
    layout: SidLayout, sids: np.ndarray, sid_item_offsets: np.ndarray, item_ids: list[str]
) -> str:
    """sha256 over layout + sorted SIDs + items per SID (sorted, so input order is irrelevant).

    The node/edge arrays are a pure function of (layout, sids), so they need not be hashed.
    """
    canonical = list(item_ids)
    sizes = np.diff(sid_item_offsets)
    # Only SIDs shared by several items need re-ordering; those are usually few.
    for sid in np.flatnonzero(sizes > 1).tolist():
        lo, hi = int(sid_item_offsets[sid]), int(sid_item_offsets[sid + 1])
        canonical[lo:hi] = sorted(canonical[lo:hi])
    blob, offsets = encode_strings(canonical)
    h = hashlib.sha256()
    h.update(f"widebeam-sid-trie/v{ARTIFACT_FORMAT_VERSION}\0{layout.to_spec()}\0".encode())
    for arr in (
        np.ascontiguousarray(sids, dtype="<i4"),
        np.ascontiguousarray(sid_item_offsets, dtype="<i8"),
        offsets.astype("<i8"),
        blob,
    ):
        h.update(arr.tobytes())
    return h.hexdigest()
