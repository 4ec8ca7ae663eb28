"""Pickle-free artifact encoding: named numpy arrays -> zlib stream -> sha256-checked chunks.

Raw layout (before compression)::

    b"WBARR01\\n" | u64-le header length | header JSON | array bytes, back to back

The header lists ``{"name", "dtype", "shape", "nbytes"}`` per array in payload order. Only
plain numeric dtypes (bool, ints, floats) are accepted, always little-endian, C order, so
decoding never executes anything and is a zero-copy ``np.frombuffer`` per array.
"""

from __future__ import annotations

import hashlib
import json
import struct
import zlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from widebeam.services.catalog.store.types import ArtifactError

MAGIC = b"WBARR01\n"
ENCODING = "wbarrays/1"
COMPRESSION = "zlib"
_ALLOWED_KINDS = frozenset("biuf")


def _header(arrays: Mapping[str, np.ndarray]) -> tuple[bytes, list[np.ndarray]]:
    entries, bodies = [], []
    for name, arr in arrays.items():
        a = np.asarray(arr)
        if a.dtype.kind not in _ALLOWED_KINDS:
            raise TypeError(f"array {name!r}: dtype {a.dtype} is not a plain numeric type")
        a = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<"))
        entry = {"name": name, "dtype": a.dtype.str, "shape": list(a.shape), "nbytes": a.nbytes}
        entries.append(entry)
        bodies.append(a)
    header = json.dumps({"arrays": entries}, separators=(",", ":")).encode("utf-8")
    return MAGIC + struct.pack("<Q", len(header)) + header, bodies


def encode_chunks(
    arrays: Mapping[str, np.ndarray], chunk_bytes: int, level: int = 1
) -> tuple[list[bytes], dict[str, Any]]:
    """Compress ``arrays`` into chunks of at most ``chunk_bytes``; returns (chunks, info).

    ``info`` goes into the manifest: encoding, raw/payload sizes, per-chunk sizes and sha256,
    and the sha256 of the whole compressed payload.
    """
    if chunk_bytes <= 0:
        raise ValueError(f"chunk_bytes must be positive, got {chunk_bytes}")
    head, bodies = _header(arrays)
    comp = zlib.compressobj(level)
    chunks: list[bytes] = []
    pending = bytearray()

    def feed(data: bytes) -> None:
        # Streaming keeps peak memory near one compressed copy, not raw + compressed.
        pending.extend(data)
        while len(pending) >= chunk_bytes:
            chunks.append(bytes(pending[:chunk_bytes]))
            del pending[:chunk_bytes]

    raw_bytes = len(head)
    feed(comp.compress(head))
    for body in bodies:
        raw_bytes += body.nbytes
        feed(comp.compress(memoryview(body).cast("B")))
    feed(comp.flush())
    if pending or not chunks:
        chunks.append(bytes(pending))
    whole = hashlib.sha256()
    for c in chunks:
        whole.update(c)
    info = {
        "encoding": ENCODING,
        "compression": COMPRESSION,
        "raw_bytes": raw_bytes,
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


def decode_chunks(chunks: Sequence[bytes], info: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Inverse of :func:`encode_chunks` (call :func:`verify_chunks` first)."""
    if info.get("encoding") != ENCODING or info.get("compression") != COMPRESSION:
        raise ArtifactError(
            f"{where}: unsupported artifact encoding {info.get('encoding')!r}/"
            f"{info.get('compression')!r}"
        )
    raw = bytearray()
    decomp = zlib.decompressobj()
    try:
        for chunk in chunks:
            raw.extend(decomp.decompress(chunk))
        raw.extend(decomp.flush())
    except zlib.error as exc:
        raise ArtifactError(f"{where}: payload does not decompress: {exc}") from None
    if len(raw) != int(info["raw_bytes"]) or not decomp.eof:
        raise ArtifactError(f"{where}: payload is {len(raw)} bytes, expected {info['raw_bytes']}")
    try:
        return dict(_split_arrays(memoryview(raw)))
    except (ValueError, KeyError, TypeError, struct.error) as exc:
        raise ArtifactError(f"{where}: malformed artifact payload: {exc}") from None


def _split_arrays(raw: memoryview) -> Iterator[tuple[str, np.ndarray]]:
    if bytes(raw[: len(MAGIC)]) != MAGIC:
        raise ValueError("bad magic")
    (hlen,) = struct.unpack_from("<Q", raw, len(MAGIC))
    pos = len(MAGIC) + 8
    header = json.loads(bytes(raw[pos : pos + hlen]))
    pos += hlen
    for entry in header["arrays"]:
        dtype = np.dtype(str(entry["dtype"]))
        if dtype.kind not in _ALLOWED_KINDS:
            raise ValueError(f"array {entry['name']!r}: dtype {dtype} not allowed")
        shape = tuple(int(s) for s in entry["shape"])
        nbytes = int(entry["nbytes"])
        if nbytes != dtype.itemsize * int(np.prod(shape, dtype=np.int64)) or pos + nbytes > len(
            raw
        ):
            raise ValueError(f"array {entry['name']!r}: size does not match its shape")
        yield (
            str(entry["name"]),
            np.frombuffer(raw, dtype, nbytes // dtype.itemsize, pos).reshape(shape),
        )
        pos += nbytes
    if pos != len(raw):
        raise ValueError(f"{len(raw) - pos} trailing bytes")
