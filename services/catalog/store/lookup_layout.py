"""Packed lookup buckets (lookup layout ``packed/1``): the byte format, its hashes, and both
directions — numpy packing of a whole table, and the search of one fetched bucket.

A table is a list of *records*, each with ``L`` SID codes and a list of strings (item ids):
the item -> SID table has one record per item (its id, its SID), the SID -> items table one per
SID (its items, in trie order). Records are hashed into ``B`` buckets; each bucket is one Redis
STRING, all little-endian::

    u32 m, u32 s                  records, strings in the bucket
    i32 codes[m * L]              SID codes of record r at codes[r*L : (r+1)*L]
    u32 string_starts[m + 1]      record r owns strings string_starts[r] .. string_starts[r+1]-1
    u32 byte_offsets[s + 1]       string j is blob[byte_offsets[j] : byte_offsets[j+1]]
    u8  blob[byte_offsets[s]]     UTF-8 bytes of the strings, back to back

Bucket of an item: ``item_hash(utf-8 id) % B``; of a SID: ``sid_hash(codes) % B``. Both hashes
are a polynomial over the bytes / codes modulo 2**64 finished with murmur3's fmix64, so Python
(one key, at lookup) and numpy (every key, at publish) compute the same value. Buckets that
hold no record are not written.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

LAYOUT = "packed/1"
RECORDS_PER_BUCKET = 64  # a lookup fetches ~1-2 KiB; ~300k keys per table at 10M items

_MASK = (1 << 64) - 1
_P = 0x100000001B3  # FNV-64 prime: odd, so invertible modulo 2**64
_P_INV = pow(_P, -1, 1 << 64)
_FMIX = (0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53)
_HEADER_WORDS = 2
# Bytes of item ids hashed per numpy pass: bounds the power tables (3 x 8 bytes a byte).
_HASH_CHUNK_BYTES = 1 << 22
# Records packed per numpy pass of the writer: bounds its index arrays.
_PACK_CHUNK_RECORDS = 1 << 18


def bucket_count(records: int) -> int:
    return max(1, -(-records // RECORDS_PER_BUCKET))


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


# -- packing every bucket of a table ---------------------------------------------------------


@dataclass(frozen=True)
class Records:
    """A table to pack: record r has ``codes[r]`` and the strings ``string_lo[r] ..
    string_lo[r] + string_count[r] - 1`` of (``blob``, ``offsets``)."""

    codes: np.ndarray  # [m, L] int32
    string_lo: np.ndarray  # [m] int64
    string_count: np.ndarray  # [m] int64
    blob: np.ndarray  # [bytes] uint8
    offsets: np.ndarray  # [strings+1] int64


def _ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Concatenation of arange(starts[i], starts[i] + counts[i]) for all i, as int64."""
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    before = np.cumsum(counts) - counts  # exclusive prefix
    return np.repeat(starts - before, counts) + np.arange(total, dtype=np.int64)


def _within(group_first: np.ndarray, groups: np.ndarray, n: int) -> np.ndarray:
    """[n] position of each element inside its group (elements sorted by group)."""
    return np.arange(n, dtype=np.int64) - group_first[groups]


def pack_buckets(
    records: Records, bucket_of_record: np.ndarray, buckets: int
) -> Iterator[tuple[int, memoryview, memoryview]]:
    """(bucket, numeric part, blob part) of every non-empty bucket; a bucket's value is the two
    parts back to back. Works through the records a chunk of buckets at a time."""
    depth = records.codes.shape[1]
    # Order inside a bucket is free (its records are distinct), so no stable sort is needed.
    order = np.argsort(bucket_of_record)  # [m] int64
    sorted_buckets = bucket_of_record[order]
    # first record (in `order`) of every bucket 0..buckets
    bucket_first = np.searchsorted(sorted_buckets, np.arange(buckets + 1))
    b0 = 0
    while b0 < buckets:
        r0 = int(bucket_first[b0])
        b1 = int(np.searchsorted(bucket_first, r0 + _PACK_CHUNK_RECORDS, side="right")) - 1
        b1 = min(max(b1, b0 + 1), buckets)
        r1 = int(bucket_first[b1])
        yield from _pack_chunk(records, order[r0:r1], bucket_first[b0 : b1 + 1] - r0, depth, b0)
        b0 = b1


def _pack_chunk(
    records: Records, rows: np.ndarray, first: np.ndarray, depth: int, bucket_base: int
) -> Iterator[tuple[int, memoryview, memoryview]]:
    nb, nr = len(first) - 1, len(rows)
    rec_bucket = np.repeat(np.arange(nb), np.diff(first))  # [nr] local bucket of each record
    m = np.diff(first)  # [nb] records per bucket
    counts = records.string_count[rows]  # [nr] strings per record
    string_ids = _ranges(records.string_lo[rows], counts)  # [ns] global string index
    lens = records.offsets[string_ids + 1] - records.offsets[string_ids]  # [ns] bytes
    str_bucket = np.repeat(rec_bucket, counts)  # [ns]
    s = np.bincount(str_bucket, minlength=nb)  # [nb] strings per bucket
    str_first = np.concatenate(([0], np.cumsum(s)))
    byte_bucket_total = np.bincount(str_bucket, weights=lens, minlength=nb).astype(np.int64)
    blob = records.blob[_ranges(records.offsets[string_ids], lens)]  # [bytes] uint8
    blob_first = np.concatenate(([0], np.cumsum(byte_bucket_total)))

    words = _HEADER_WORDS + depth * m + (m + 1) + (s + 1)  # [nb]
    word_first = np.concatenate(([0], np.cumsum(words)))
    packed = np.zeros(int(word_first[-1]), dtype="<u4")
    base = word_first[:-1]
    packed[base] = m
    packed[base + 1] = s
    pos = _within(first, rec_bucket, nr)  # [nr] record index inside its bucket
    code_at = base[rec_bucket] + _HEADER_WORDS + pos * depth  # [nr]
    codes = records.codes[rows].astype("<i4").view("<u4")  # [nr, L]
    for lvl in range(depth):
        packed[code_at + lvl] = codes[:, lvl]
    starts_base = base + _HEADER_WORDS + depth * m  # [nb]
    count_first = np.cumsum(counts) - counts  # exclusive prefix over records of the chunk
    packed[starts_base[rec_bucket] + pos] = count_first - str_first[rec_bucket]
    packed[starts_base + m] = s
    offsets_base = starts_base + m + 1  # [nb]
    q = _within(str_first, str_bucket, len(string_ids))  # [ns] string index inside its bucket
    byte_first = np.cumsum(lens) - lens
    packed[offsets_base[str_bucket] + q] = byte_first - blob_first[str_bucket]
    packed[offsets_base + s] = byte_bucket_total

    numeric = memoryview(packed.view(np.uint8))
    blob_view = memoryview(blob)
    wf = (word_first * 4).tolist()
    bf = blob_first.tolist()
    for b in np.flatnonzero(m).tolist():
        yield bucket_base + b, numeric[wf[b] : wf[b + 1]], blob_view[bf[b] : bf[b + 1]]


# -- reading one bucket ----------------------------------------------------------------------


class MalformedBucketError(ValueError):
    pass


@dataclass(frozen=True)
class Bucket:
    """One fetched bucket, parsed lazily into numpy views of its bytes."""

    codes: np.ndarray  # [m, L] int32
    string_starts: np.ndarray  # [m+1] uint32
    byte_offsets: np.ndarray  # [s+1] uint32
    blob: bytes

    @classmethod
    def parse(cls, raw: bytes, depth: int) -> Bucket:
        if len(raw) < 8:
            raise MalformedBucketError(f"{len(raw)} bytes, shorter than its header")
        m, s = (int(x) for x in np.frombuffer(raw, "<u4", 2))
        words = _HEADER_WORDS + depth * m + (m + 1) + (s + 1)
        if len(raw) < words * 4:
            raise MalformedBucketError(f"{len(raw)} bytes for {m} records and {s} strings")
        numeric = np.frombuffer(raw, "<u4", words)
        codes = numeric[_HEADER_WORDS : _HEADER_WORDS + depth * m].view("<i4").reshape(m, depth)
        at = _HEADER_WORDS + depth * m
        starts, offsets = numeric[at : at + m + 1], numeric[at + m + 1 :]
        blob = raw[words * 4 :]
        if int(starts[-1]) != s or int(offsets[-1]) != len(blob):
            raise MalformedBucketError("string counts or byte offsets do not match its size")
        return cls(codes, starts, offsets, blob)

    def find_string(self, key: bytes) -> int:
        """Index of the string equal to ``key``, or -1."""
        starts = self.byte_offsets[:-1]
        pos = self.blob.find(key)
        while pos >= 0:
            j = int(np.searchsorted(starts, pos))
            if j < len(starts) and starts[j] == pos and self.byte_offsets[j + 1] - pos == len(key):
                return j
            pos = self.blob.find(key, pos + 1)
        return -1

    def record_of_string(self, j: int) -> int:
        return int(np.searchsorted(self.string_starts, j, side="right")) - 1

    def find_codes(self, codes: Sequence[int]) -> int:
        """Index of the record whose codes are ``codes``, or -1."""
        if len(codes) != self.codes.shape[1] or not len(self.codes):
            return -1
        hit = np.flatnonzero((self.codes == np.asarray(codes, dtype=np.int64)).all(axis=1))
        return int(hit[0]) if len(hit) else -1

    def strings_of(self, record: int) -> list[str]:
        lo, hi = int(self.string_starts[record]), int(self.string_starts[record + 1])
        off = self.byte_offsets[lo : hi + 1].tolist()
        blob = self.blob
        return [blob[a:b].decode("utf-8") for a, b in itertools.pairwise(off)]
