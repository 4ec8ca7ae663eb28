"""A read-only sequence of strings held as one UTF-8 buffer plus byte offsets.

A catalog version names millions of items; as Python ``str`` objects each id costs ~60 bytes
plus an 8-byte list slot, as a string table it costs its UTF-8 bytes plus an 8-byte offset.
Strings are made only when asked for (``table[i]``, ``table[a:b]``, :meth:`take`), so a
response materialises just the items it returns. :meth:`hashes` gives every string a 64-bit
hash computed over the buffer with numpy (no per-string Python work), the same value
:func:`hash_strings` gives a list of query strings.
"""

from __future__ import annotations

import codecs
import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import overload

import numpy as np

_SEPARATOR = 0x0A  # "\n": never part of a multi-byte UTF-8 sequence
_UTF8_PIECE = 1 << 20  # bytes validated per step
_ITER_BATCH = 1 << 16  # strings decoded per step when iterating a whole table

# Polynomial hash over a string's bytes, mod 2^64: h = sum(byte_j * P^j) + len * L.
# P is odd, so P is invertible mod 2^64 and a substring's hash can be cut out of prefix sums.
_P = np.uint64(0x100000001B3)  # the 64-bit FNV prime
_P_INV = np.uint64(pow(0x100000001B3, -1, 1 << 64))
_L = np.uint64(0x9E3779B97F4A7C15)
_HASH_CHUNK_BYTES = 1 << 19  # bytes hashed per step: temporaries and power tables ~4 MB each


class StringTable(Sequence[str]):
    """Strings ``i`` = ``blob[offsets[i]:offsets[i+1]]`` decoded as UTF-8. Immutable."""

    def __init__(
        self,
        blob: np.ndarray,  # [total_bytes] uint8, the strings' UTF-8 back to back
        offsets: np.ndarray,  # [n+1] int64, byte offsets; offsets[0] = 0, offsets[n] = len(blob)
    ) -> None:
        blob = np.ascontiguousarray(blob, dtype=np.uint8).reshape(-1)
        offsets = np.ascontiguousarray(offsets, dtype=np.int64).reshape(-1)
        if len(offsets) < 1 or offsets[0] != 0 or offsets[-1] != len(blob):
            raise ValueError("string table offsets must start at 0 and end at the buffer's length")
        if len(offsets) > 1 and (np.diff(offsets) < 0).any():
            raise ValueError("string table offsets must not decrease")
        blob.setflags(write=False)
        offsets.setflags(write=False)
        self.blob = blob
        self.offsets = offsets
        self._view = memoryview(blob)
        self._hash_index: np.ndarray | None = None

    @classmethod
    def from_strings(cls, strings: Iterable[str]) -> StringTable:
        if isinstance(strings, StringTable):
            return strings
        return cls(*encode_strings(list(strings)))

    def check_utf8(self) -> None:
        """UnicodeDecodeError unless every string is valid UTF-8 on its own.

        The whole buffer is decoded once, in 1 MiB pieces so that a process's other threads
        get the interpreter in between; with that, a string is valid exactly when it does not
        start inside another character (on a UTF-8 continuation byte)."""
        decoder = codecs.getincrementaldecoder("utf-8")("strict")
        for at in range(0, len(self.blob), _UTF8_PIECE):
            decoder.decode(self._view[at : at + _UTF8_PIECE], False)
        decoder.decode(b"", True)
        starts = self.offsets[:-1]
        starts = starts[starts < len(self.blob)]
        bad = np.flatnonzero((self.blob[starts] & 0xC0) == 0x80)
        if bad.size:
            at = int(starts[bad[0]])
            raise UnicodeDecodeError("utf-8", bytes(self._view[at : at + 1]), 0, 1, "string "
                                     f"{int(bad[0])} starts inside a character")  # fmt: skip

    # -- sequence -----------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> list[str]: ...
    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                return [self[i] for i in range(start, stop, step)]
            if stop <= start:
                return []
            return decode_strings(
                self.blob[self.offsets[start] : self.offsets[stop]],
                self.offsets[start : stop + 1] - self.offsets[start],
            )
        n = len(self)
        i = int(index)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("string table index out of range")
        return str(self._view[self.offsets[i] : self.offsets[i + 1]], "utf-8")

    def __iter__(self) -> Iterator[str]:
        for start in range(0, len(self), _ITER_BATCH):
            yield from self[start : start + _ITER_BATCH]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StringTable):
            return np.array_equal(self.offsets, other.offsets) and np.array_equal(
                self.blob, other.blob
            )
        if isinstance(other, list | tuple):
            return len(other) == len(self) and list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"StringTable({len(self)} strings, {len(self.blob)} bytes)"

    def take(self, positions: Sequence[int] | np.ndarray) -> list[str]:
        """The strings at ``positions``, in that order."""
        view, offsets = self._view, self.offsets
        return [str(view[offsets[p] : offsets[p + 1]], "utf-8") for p in positions]

    def take_ranges(
        self,
        starts: np.ndarray,  # [m] int64, first position of each range
        stops: np.ndarray,  # [m] int64, one past its last position (stops >= starts)
    ) -> list[list[str]]:
        """Per range, its strings in order. One gather for all ranges: a response names
        thousands of short ranges (a beam's SID has an item or two), and slicing the table
        once per range would cost a few numpy calls each."""
        starts = np.asarray(starts, dtype=np.int64)
        stops = np.asarray(stops, dtype=np.int64)
        counts = stops - starts  # [m]
        if counts.size == 0:
            return []
        fewest, most = int(counts.min()), int(counts.max())
        if fewest < 0:
            raise IndexError("string table range out of bounds")
        if most == 0:
            return [[] for _ in range(counts.size)]
        if fewest == most == 1:  # one string a range (a SID with one item): no positions to make
            self._check_bounds(starts, stops)
            return [[s] for s in self._joined(starts, stops)]
        used = counts > 0
        self._check_bounds(starts[used], stops[used])
        ends = np.cumsum(counts)
        positions = np.arange(int(ends[-1]), dtype=np.int64) + np.repeat(
            starts - (ends - counts), counts
        )  # [sum(counts)]
        pieces = iter(self._joined(positions, positions + 1))
        return [list(itertools.islice(pieces, c)) for c in counts.tolist()]

    def _check_bounds(
        self,
        starts: np.ndarray,  # [r] int64, ranges that hold strings
        stops: np.ndarray,  # [r] int64
    ) -> None:
        if starts.min() < 0 or stops.max() > len(self):
            raise IndexError("string table range out of bounds")

    def _joined(
        self,
        starts: np.ndarray,  # [r] int64, first position of each range
        stops: np.ndarray,  # [r] int64, one past its last position
    ) -> list[str]:
        """Per range, its strings' bytes back to back as one str: the string itself for a
        range of one."""
        lows, highs = self.offsets[starts].tolist(), self.offsets[stops].tolist()
        view = self._view
        return [str(view[a:b], "utf-8") for a, b in zip(lows, highs, strict=True)]

    def raw(self, position: int) -> memoryview:
        """The UTF-8 bytes of string ``position`` (a view into the buffer)."""
        return self._view[self.offsets[position] : self.offsets[position + 1]]

    def raws(self, positions: np.ndarray) -> list[memoryview]:  # positions: [m] int64
        """:meth:`raw` of each of ``positions``, with one gather for all of them."""
        lows, highs = self.offsets[positions].tolist(), self.offsets[positions + 1].tolist()
        view = self._view
        return [view[a:b] for a, b in zip(lows, highs, strict=True)]

    @property
    def nbytes(self) -> int:
        return int(self.blob.nbytes + self.offsets.nbytes)

    def hashes(self) -> np.ndarray:  # [n] int64
        return _hash_blob(self.blob, self.offsets)

    @property
    def hash_index(self) -> np.ndarray:  # [n] uint64, ascending
        """:func:`pack_hash_index` of this table's hashes: computed once, or attached."""
        if self._hash_index is None:
            self.attach_hash_index(pack_hash_index(self.hashes()))
        return self._hash_index  # type: ignore[return-value]

    def attach_hash_index(self, index: np.ndarray) -> None:
        """Adopt a :attr:`hash_index` computed elsewhere (a process that loaded this table)."""
        if index.shape != (len(self),) or index.dtype != np.uint64:
            raise ValueError(f"a hash index of {len(self)} uint64 values, got {index.shape} "
                             f"{index.dtype}")  # fmt: skip
        index.setflags(write=False)
        self._hash_index = index


def position_bits(n: int) -> int:
    """Low bits of a :func:`pack_hash_index` entry that hold the string's position."""
    return max(1, (n - 1).bit_length())


def pack_hash_index(hashes: np.ndarray) -> np.ndarray:  # [n] uint64, ascending
    """One uint64 per string, sorted: its hash's high bits over its position in the table
    (the low ``position_bits(n)`` bits), so equal hash bits sort by position. A lookup binary
    searches for a string's hash bits, then compares the strings there byte by byte."""
    n = len(hashes)
    packed = hashes.view(np.uint64) & ~np.uint64((1 << position_bits(n)) - 1)
    packed |= np.arange(n, dtype=np.uint64)
    packed.sort()  # numpy's vectorised sort: ~0.1 s for 10M values (argsort is ~10x slower)
    return packed


def hash_strings(strings: Sequence[str]) -> np.ndarray:  # [n] int64
    """The :meth:`StringTable.hashes` value of each of ``strings``."""
    return hash_encoded([s.encode("utf-8", "surrogatepass") for s in strings])


def hash_encoded(encoded: Sequence[bytes]) -> np.ndarray:  # [n] int64
    """The :meth:`StringTable.hashes` value of each UTF-8 string of ``encoded``."""
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)), out=offsets[1:])
    return _hash_blob(np.frombuffer(b"".join(encoded), dtype=np.uint8), offsets)


def _hash_blob(blob: np.ndarray, offsets: np.ndarray) -> np.ndarray:  # [n] int64
    n = len(offsets) - 1
    if n > 0 and offsets[-1] - offsets[0] <= _HASH_CHUNK_BYTES:  # one chunk (a request's ids)
        base = int(offsets[0])
        return _hash_span(blob[base : int(offsets[-1])], offsets - base).view(np.int64)
    out = np.empty(n, dtype=np.uint64)
    lo = 0
    while lo < n:
        base = int(offsets[lo])
        # as many whole strings as fit in one chunk; at least one, however long
        hi = int(np.searchsorted(offsets, base + _HASH_CHUNK_BYTES, side="right")) - 1
        hi = min(n, max(hi, lo + 1))
        out[lo:hi] = _hash_span(blob[base : int(offsets[hi])], offsets[lo : hi + 1] - base)
        lo = hi
    return out.view(np.int64)


def _hash_span(blob: np.ndarray, offsets: np.ndarray) -> np.ndarray:  # [m] uint64
    """Hashes of the strings of one chunk: prefix sums of byte * P^k over the chunk, each
    string's difference scaled back by P^-start so the hash does not depend on where it lies."""
    powers = _powers(_P, len(blob))
    prefix = np.zeros(len(blob) + 1, dtype=np.uint64)
    np.cumsum(blob.astype(np.uint64) * powers, out=prefix[1:])
    starts = offsets[:-1]
    h = (prefix[offsets[1:]] - prefix[starts]) * _powers(_P_INV, len(blob) + 1)[starts]
    return h + np.diff(offsets).astype(np.uint64) * _L


_POWER_CACHE: dict[int, np.ndarray] = {}


def _powers(base: np.uint64, count: int) -> np.ndarray:  # [count] uint64: base^0 .. base^(count-1)
    if count > _HASH_CHUNK_BYTES + 1:  # one string longer than a chunk: not worth keeping
        return _power_table(base, count)
    cached = _POWER_CACHE.get(int(base))
    if cached is None:
        cached = _POWER_CACHE[int(base)] = _power_table(base, _HASH_CHUNK_BYTES + 1)
    return cached[:count]


def _power_table(base: np.uint64, count: int) -> np.ndarray:  # [count] uint64
    table = np.empty(count, dtype=np.uint64)
    table[:1] = 1
    table[1:] = base
    np.cumprod(table, out=table)  # wraps mod 2^64, as the hash wants
    table.setflags(write=False)
    return table


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
    if n < 8 or not well_formed or (blob == _SEPARATOR).any():
        raw = memoryview(blob)
        return [str(raw[a:b], "utf-8") for a, b in itertools.pairwise(offsets.tolist())]
    # byte j of string i lands at offsets[i] + i + j: after the i separators before it
    keep = np.ones(len(blob) + n - 1, dtype=bool)
    keep[offsets[1:-1] + np.arange(n - 1)] = False
    with_separators = np.full(len(keep), _SEPARATOR, dtype=np.uint8)
    with_separators[keep] = blob
    del keep
    return with_separators.tobytes().decode("utf-8").split("\n")
