"""Pickle-free artifact encoding: named numpy arrays -> zlib pieces -> sha256-checked chunks.

Raw layout (before compression)::

    b"WBARR01\\n" | u64-le header length | header JSON | array bytes

The header lists ``{"name", "dtype", "shape", "nbytes"}`` per array in payload order. Only
plain numeric dtypes (bool, ints, floats) are accepted, always little-endian, C order, so
decoding never executes anything and is a zero-copy ``np.frombuffer`` per array. In
``wbarrays/2`` every array starts at a multiple of ``ALIGN`` bytes from the payload's start
(zero bytes between; the header JSON is padded with spaces), so the views are aligned and a
loader keeps them instead of copying (``unpack_arrays``); ``wbarrays/1``, what older versions
published, has the arrays back to back. The raw bytes are compressed as independent pieces
(``zlib_pieces.py``), on several threads both ways.
"""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from widebeam.services.catalog.store import zlib_pieces
from widebeam.services.catalog.store.types import ArtifactError

MAGIC = b"WBARR01\n"
ENCODING = "wbarrays/2"
UNALIGNED_ENCODING = "wbarrays/1"  # read, never written
ALIGN = 64
_ALLOWED_KINDS = frozenset("biuf")


def _header(arrays: Mapping[str, np.ndarray]) -> tuple[bytes, list[np.ndarray | bytes]]:
    """The header and the payload's parts after it: each array, and the zero bytes that
    align the next one."""
    entries, arrays_in_order = [], []
    for name, arr in arrays.items():
        a = np.asarray(arr)
        if a.dtype.kind not in _ALLOWED_KINDS:
            raise TypeError(f"array {name!r}: dtype {a.dtype} is not a plain numeric type")
        a = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<"))
        entry = {"name": name, "dtype": a.dtype.str, "shape": list(a.shape), "nbytes": a.nbytes}
        entries.append(entry)
        arrays_in_order.append(a)
    header = json.dumps({"arrays": entries}, separators=(",", ":")).encode("utf-8")
    header += b" " * _padding(len(MAGIC) + 8 + len(header))
    bodies: list[np.ndarray | bytes] = []
    for a in arrays_in_order:
        bodies.append(a)
        bodies.append(bytes(_padding(a.nbytes)))
    return MAGIC + struct.pack("<Q", len(header)) + header, bodies


def _padding(size: int) -> int:
    return -size % ALIGN


def encode_chunks(
    arrays: Mapping[str, np.ndarray],
    chunk_bytes: int,
    level: int = 1,
    piece_bytes: int = zlib_pieces.DEFAULT_PIECE_BYTES,
    workers: int | None = None,
) -> tuple[list[bytes], dict[str, Any]]:
    """Compress ``arrays`` into chunks of at most ``chunk_bytes``; returns (chunks, info).

    ``info`` goes into the manifest: encoding, compression and its pieces, raw/payload sizes,
    per-chunk sizes and sha256, and the sha256 of the whole compressed payload.
    """
    if chunk_bytes <= 0:
        raise ValueError(f"chunk_bytes must be positive, got {chunk_bytes}")
    head, bodies = _header(arrays)
    parts = [memoryview(head), *(memoryview(b).cast("B") for b in bodies if len(b))]
    chunks, piece_chunks = zlib_pieces.compress(
        parts, piece_bytes, chunk_bytes, level, workers or zlib_pieces.default_workers()
    )
    whole = hashlib.sha256()
    for c in chunks:
        whole.update(c)
    info = {
        "encoding": ENCODING,
        "compression": zlib_pieces.PIECES,
        "piece_bytes": piece_bytes,
        "piece_chunks": piece_chunks,
        "raw_bytes": len(head) + sum(memoryview(b).nbytes for b in bodies),
        "payload_bytes": sum(map(len, chunks)),
        "payload_sha256": whole.hexdigest(),
        "chunk_count": len(chunks),
        "chunk_sizes": [len(c) for c in chunks],
        "chunk_sha256": [hashlib.sha256(c).hexdigest() for c in chunks],
    }
    return chunks, info


def verify_chunks(chunks: Sequence[bytes | None], info: Mapping[str, Any], where: str) -> None:
    """Raise ArtifactError naming the first missing or corrupt chunk."""
    count = int(info["chunk_count"])
    if len(chunks) != count:
        raise ArtifactError(f"{where}: expected {count} chunks, got {len(chunks)}")
    whole = hashlib.sha256()
    for i, (chunk, want) in enumerate(zip(chunks, info["chunk_sha256"], strict=True)):
        if chunk is None:
            raise ArtifactError(f"{where}: chunk {i}/{count} is missing")
        got = hashlib.sha256(chunk).hexdigest()
        if got != want:
            raise ArtifactError(
                f"{where}: chunk {i}/{count} checksum mismatch (sha256 {got[:12]}…, "
                f"manifest says {want[:12]}…)"
            )
        whole.update(chunk)
    if whole.hexdigest() != info["payload_sha256"]:
        raise ArtifactError(f"{where}: payload checksum mismatch")


def decode_chunks(
    chunks: Iterable[bytes | None],
    info: Mapping[str, Any],
    where: str,
    workers: int | None = None,
    into: memoryview | None = None,
) -> dict[str, Any]:
    """Inverse of :func:`encode_chunks` (call :func:`verify_chunks` first, or beside it: a
    chunk's damage is reported either way); ``chunks`` may still be arriving. The arrays are
    views of ``into`` (``info["raw_bytes"]`` writable bytes) when given, else of a new buffer."""
    compression, encoding = info.get("compression"), info.get("encoding")
    if encoding not in (ENCODING, UNALIGNED_ENCODING) or compression not in (
        zlib_pieces.PIECES,
        zlib_pieces.SINGLE_STREAM,
    ):
        raise ArtifactError(f"{where}: unsupported artifact encoding {encoding!r}/{compression!r}")
    piece_bytes, piece_chunks = zlib_pieces.layout(info, where)
    raw = zlib_pieces.decompress(
        chunks, int(info["raw_bytes"]), piece_bytes, piece_chunks, where,
        workers or zlib_pieces.default_workers(), into,
    )  # fmt: skip
    try:
        return split_arrays(raw, aligned=encoding == ENCODING)
    except (ValueError, KeyError, TypeError, struct.error) as exc:
        raise ArtifactError(f"{where}: malformed artifact payload: {exc}") from None


def split_arrays(raw: memoryview, aligned: bool = True) -> dict[str, np.ndarray]:
    """The named arrays of a raw payload, views of ``raw``; ValueError (or KeyError,
    TypeError, struct.error) when it is malformed. ``aligned``: the ``wbarrays/2`` layout."""
    if bytes(raw[: len(MAGIC)]) != MAGIC:
        raise ValueError("bad magic")
    (hlen,) = struct.unpack_from("<Q", raw, len(MAGIC))
    pos = len(MAGIC) + 8
    header = json.loads(bytes(raw[pos : pos + hlen]))
    pos += hlen
    arrays = {}
    for entry in header["arrays"]:
        dtype = np.dtype(str(entry["dtype"]))
        if dtype.kind not in _ALLOWED_KINDS:
            raise ValueError(f"array {entry['name']!r}: dtype {dtype} not allowed")
        shape = tuple(int(s) for s in entry["shape"])
        nbytes = int(entry["nbytes"])
        if aligned:
            pos = _skip_padding(raw, pos)
        if nbytes != dtype.itemsize * int(np.prod(shape, dtype=np.int64)) or pos + nbytes > len(
            raw
        ):
            raise ValueError(f"array {entry['name']!r}: size does not match its shape")
        arrays[str(entry["name"])] = np.frombuffer(
            raw, dtype, nbytes // dtype.itemsize, pos
        ).reshape(shape)
        pos += nbytes
    if aligned:
        pos = _skip_padding(raw, pos)
    if pos != len(raw):
        raise ValueError(f"{len(raw) - pos} trailing bytes")
    return arrays


def _skip_padding(raw: memoryview, pos: int) -> int:
    end = min(pos + _padding(pos), len(raw))
    if any(raw[pos:end]):
        raise ValueError(f"nonzero padding at byte {pos}")
    return end
