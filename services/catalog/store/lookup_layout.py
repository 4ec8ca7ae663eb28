"""Packed lookup tables (lookup layout ``packed/1``): their byte format, hashes, the numpy
packing of a whole version and the parsing of fetched buckets.

Three tables of binary STRING buckets, all little-endian uint32 words unless said otherwise
(``L`` = SID depth, ``n`` = items in trie order, ``K`` = ``NAMES_PER_BUCKET``)::

    names:{k}   item ids of trie positions k*K .. k*K+K-1: u32 byte length of each, then
                their UTF-8 bytes back to back
    items:{b}   one record per item whose hash falls in bucket b: hash_hi, position, codes[L]
    sids:{b}    one record per SID whose hash falls in bucket b: hash_hi, first item position,
                item count, codes[L] (i32)

Bucket ``b`` of a hash ``h`` is its top ``bits`` bits (``2**bits`` buckets, ~``K`` records
each); ``hash_hi`` is ``h >> 32``, which lets a reader skip records without reading names.
An item lookup reads its items bucket, then the names bucket of each candidate to compare the
id; a SID lookup reads its sids bucket, then the names buckets of its items. Every bucket is a
contiguous slice of one array sorted by (hash, position), so packing a version is a few numpy
sorts and gathers of fixed-width rows — no per-item Python and no per-byte index. Both hashes
are a polynomial modulo 2**64 finished with murmur3's fmix64, the same value from Python (one
key) and numpy (every key).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

LAYOUT = "packed/1"
MAX_CODE = 2**31 - 1  # codes are stored as int32
NAMES_PER_BUCKET = 128
RECORDS_PER_BUCKET = 64  # at least, on average (up to twice that): a lookup fetches ~2-3 KiB

_MASK = (1 << 64) - 1
_P = 0x100000001B3  # FNV-64 prime: odd, so invertible modulo 2**64
_P_INV = pow(_P, -1, 1 << 64)
_FMIX = (0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53)
# Bytes of item ids hashed per numpy pass: bounds the power tables (8 bytes a byte each).
_HASH_CHUNK_BYTES = 1 << 22


def bucket_bits(records: int) -> int:
    """log2 of the bucket count for ``records`` (RECORDS_PER_BUCKET .. twice that a bucket)."""
    return max(0, (records // RECORDS_PER_BUCKET).bit_length() - 1)


def bucket_of_hash(h: int, bits: int) -> int:
    return h >> (64 - bits) if bits else 0


# -- hashes: one key in Python ---------------------------------------------------------------


def _fmix64(h: int) -> int:
    h ^= h >> 33
    h = (h * _FMIX[0]) & _MASK
    h ^= h >> 33
    h = (h * _FMIX[1]) & _MASK
    return h ^ (h >> 33)


def _poly(values: Sequence[int]) -> int:
    h = 0
    for v in values:
        h = (h * _P + v + 1) & _MASK
    return h


def item_hash(key: bytes) -> int:
    return _fmix64(_poly(key) ^ len(key))


def sid_hash(codes: Sequence[int]) -> int:
    return _fmix64(_poly(codes) ^ len(codes))


# -- hashes: every key with numpy (uint64 arithmetic wraps modulo 2**64) ---------------------


def _fmix64_np(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> np.uint64(33))
    h = h * np.uint64(_FMIX[0])
    h = h ^ (h >> np.uint64(33))
    h = h * np.uint64(_FMIX[1])
    return h ^ (h >> np.uint64(33))


def sid_hashes(codes: np.ndarray) -> np.ndarray:
    """[n] uint64 :func:`sid_hash` of each row of ``codes`` ([n, L] ints, non-negative)."""
    h = np.zeros(len(codes), dtype=np.uint64)
    for lvl in range(codes.shape[1]):
        h = h * np.uint64(_P) + (codes[:, lvl].astype(np.uint64) + np.uint64(1))
    return _fmix64_np(h ^ np.uint64(codes.shape[1]))


def _powers(base: int, n: int) -> np.ndarray:
    """[n] uint64: base**0 .. base**(n-1) modulo 2**64."""
    out = np.full(n, base, dtype=np.uint64)
    out[0] = 1
    return np.cumprod(out, dtype=np.uint64)


def item_hashes(blob: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """[n] uint64 :func:`item_hash` of each string (``blob`` uint8, ``offsets`` [n+1] int64).

    sum_k (b_k+1) P^(e-1-k) = P^(e-1) * sum_k (b_k+1) P^-k: one prefix sum per chunk of strings
    instead of one pass per character position."""
    n = len(offsets) - 1
    out = np.empty(n, dtype=np.uint64)
    cap = _HASH_CHUNK_BYTES
    p_pow, q_pow = _powers(_P, cap), _powers(_P_INV, cap)
    first = 0
    while first < n:
        base = int(offsets[first])
        last = int(np.searchsorted(offsets, base + cap, side="right")) - 1
        last = max(last, first + 1)  # one string longer than the chunk gets a chunk of its own
        size = int(offsets[last]) - base
        if size > len(p_pow):
            p_pow, q_pow = _powers(_P, size), _powers(_P_INV, size)
        weights = blob[base : base + size].astype(np.uint64) + np.uint64(1)
        weights *= q_pow[:size]
        prefix = np.zeros(size + 1, dtype=np.uint64)
        np.cumsum(weights, dtype=np.uint64, out=prefix[1:])
        starts = offsets[first:last] - base
        ends = offsets[first + 1 : last + 1] - base
        sums = prefix[ends] - prefix[starts]
        h = sums * p_pow[np.maximum(ends - 1, 0)]
        out[first:last] = h ^ (ends - starts).astype(np.uint64)
        first = last
    return _fmix64_np(out)


# -- packing ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Packed:
    """A table ready to write: bucket b is ``rows[first[b]:first[b+1]]``."""

    rows: np.ndarray  # [records, words] <u4, sorted by bucket
    first: np.ndarray  # [buckets+1] int64
    bits: int

    def buckets(self) -> Iterator[tuple[int, memoryview]]:
        """(bucket, its value) of every non-empty bucket."""
        view = memoryview(self.rows.reshape(-1).view(np.uint8))
        width = self.rows.shape[1] * 4
        first = self.first.tolist()
        for b in np.flatnonzero(np.diff(self.first)).tolist():
            yield b, view[first[b] * width : first[b + 1] * width]


def _by_hash(hashes: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """(record order sorted by hash, [2**bits + 1] first record of each bucket)."""
    n = len(hashes)
    row_bits = max(1, (n - 1).bit_length())
    # The low hash bits give way to the record number: every key is distinct, so a plain sort
    # (much faster than argsort) orders the records; the top bits still name the bucket.
    keys = (hashes >> np.uint64(row_bits)) << np.uint64(row_bits)
    keys |= np.arange(n, dtype=np.uint64)
    keys.sort()
    order = (keys & np.uint64((1 << row_bits) - 1)).astype(np.int64)
    top = keys >> np.uint64(64 - bits) if bits else np.zeros(n, dtype=np.uint64)
    first = np.searchsorted(top, np.arange((1 << bits) + 1, dtype=np.uint64))
    return order, first.astype(np.int64)


def pack_items(
    hashes: np.ndarray,  # [n] uint64, item_hash of each item in trie order
    sids: np.ndarray,  # [num_sids, L] int32
    sid_item_offsets: np.ndarray,  # [num_sids+1] int64
) -> Packed:
    bits = bucket_bits(len(hashes))
    order, first = _by_hash(hashes, bits)
    sid_of_item = np.repeat(np.arange(len(sids)), np.diff(sid_item_offsets))  # [n]
    depth = sids.shape[1]
    rows = np.empty((len(order), 2 + depth), dtype="<u4")
    rows[:, 0] = hashes[order] >> np.uint64(32)
    rows[:, 1] = order
    rows[:, 2:] = sids[sid_of_item[order]].astype("<i4").view("<u4")
    return Packed(rows, first, bits)


def pack_sids(
    hashes: np.ndarray,  # [num_sids] uint64, sid_hash of each SID in trie order
    sids: np.ndarray,  # [num_sids, L] int32
    sid_item_offsets: np.ndarray,  # [num_sids+1] int64
) -> Packed:
    bits = bucket_bits(len(hashes))
    order, first = _by_hash(hashes, bits)
    depth = sids.shape[1]
    rows = np.empty((len(order), 3 + depth), dtype="<u4")
    rows[:, 0] = hashes[order] >> np.uint64(32)
    rows[:, 1] = sid_item_offsets[:-1][order]
    rows[:, 2] = np.diff(sid_item_offsets)[order]
    rows[:, 3:] = sids[order].astype("<i4").view("<u4")
    return Packed(rows, first, bits)


def name_buckets(
    blob: np.ndarray, offsets: np.ndarray
) -> Iterator[tuple[int, memoryview, memoryview]]:
    """(bucket, lengths part, bytes part) of every names bucket."""
    lengths = np.diff(offsets).astype("<u4")  # [n]
    length_view = memoryview(lengths.view(np.uint8))
    blob_view = memoryview(np.ascontiguousarray(blob, dtype=np.uint8))
    bounds = [*offsets[::NAMES_PER_BUCKET].tolist(), int(offsets[-1])]
    n = len(lengths)
    for k in range(-(-n // NAMES_PER_BUCKET)):
        lo, hi = k * NAMES_PER_BUCKET, min(n, (k + 1) * NAMES_PER_BUCKET)
        yield k, length_view[lo * 4 : hi * 4], blob_view[bounds[k] : bounds[k + 1]]


# -- reading ---------------------------------------------------------------------------------


class MalformedBucketError(ValueError):
    pass


def parse_records(raw: bytes, words: int) -> np.ndarray:
    """[records, words] uint32 rows of an items / sids bucket."""
    if len(raw) % (4 * words):
        raise MalformedBucketError(f"{len(raw)} bytes is not a whole number of records")
    return np.frombuffer(raw, "<u4").reshape(-1, words)


def parse_names(raw: bytes, count: int) -> list[bytes]:
    """The ``count`` item ids (UTF-8) of a names bucket."""
    if len(raw) < 4 * count:
        raise MalformedBucketError(f"{len(raw)} bytes, shorter than its {count} lengths")
    lengths = np.frombuffer(raw, "<u4", count)
    ends = (np.cumsum(lengths, dtype=np.int64) + 4 * count).tolist()
    if (ends[-1] if ends else 4 * count) != len(raw):
        raise MalformedBucketError("item id lengths do not match its size")
    starts = [4 * count, *ends[:-1]]
    return [raw[a:b] for a, b in zip(starts, ends, strict=True)]
