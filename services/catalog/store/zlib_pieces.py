"""An artifact's payload as independent zlib streams ("pieces"), so both ends use every core.

The raw bytes are cut into pieces of ``piece_bytes`` (the last one shorter); each piece is
compressed on its own and its compressed bytes split into chunks of at most ``chunk_bytes``
(a piece's first chunk always starts a new chunk). Because no piece depends on another, a pool
of threads compresses them on publish and decompresses them on load (zlib releases the GIL), and
the load writes each piece straight into its place in one preallocated buffer.

A payload of one piece is byte for byte the older single-stream layout (``compression`` "zlib",
no piece fields), which is how artifacts published before pieces still load.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from widebeam.services.catalog.store.types import ArtifactError

SINGLE_STREAM = "zlib"  # one stream: what artifacts were before pieces
PIECES = "zlib-pieces"
DEFAULT_PIECE_BYTES = 16 << 20  # raw bytes per piece: dozens of pieces at 10M items
MAX_WORKERS = 4
_MAX_RATIO = 1032  # deflate's largest expansion: 258 bytes from 2 bits


def default_workers() -> int:
    return max(1, min(MAX_WORKERS, os.cpu_count() or 1))


def compress(
    raw: Sequence[memoryview], piece_bytes: int, chunk_bytes: int, level: int, workers: int
) -> tuple[list[bytes], list[int]]:
    """``raw`` (the payload's parts, in order) as chunks, and how many chunks each piece has."""
    if piece_bytes <= 0:
        raise ValueError(f"piece_bytes must be positive, got {piece_bytes}")
    chunks: list[bytes] = []
    piece_chunks: list[int] = []
    with ThreadPoolExecutor(workers, thread_name_prefix="catalog-compress") as pool:
        for packed in pool.map(lambda p: zlib.compress(p, level), _pieces(raw, piece_bytes)):
            split = [packed[i : i + chunk_bytes] for i in range(0, len(packed), chunk_bytes)]
            chunks.extend(split)
            piece_chunks.append(len(split))
    return chunks, piece_chunks


def _pieces(raw: Sequence[memoryview], piece_bytes: int) -> Iterator[bytes | memoryview]:
    """Consecutive ``piece_bytes`` of the concatenated parts (views where a piece lies inside
    one part; a piece across parts is joined, at most ``piece_bytes`` copied)."""
    pending: list[memoryview] = []
    size = 0
    for part in raw:
        pos = 0
        while pos < len(part):
            take = min(piece_bytes - size, len(part) - pos)
            pending.append(part[pos : pos + take])
            size += take
            pos += take
            if size == piece_bytes:
                yield pending[0] if len(pending) == 1 else b"".join(pending)
                pending, size = [], 0
    if pending:
        yield pending[0] if len(pending) == 1 else b"".join(pending)


def layout(info: Mapping[str, Any], where: str) -> tuple[int, list[int]]:
    """(piece_bytes, chunks per piece) the manifest's ``info`` describes; ArtifactError when
    they do not add up to its chunk count and raw size."""
    try:
        raw_bytes, count = int(info["raw_bytes"]), int(info["chunk_count"])
        payload_bytes = int(info["payload_bytes"])
    except (KeyError, TypeError, ValueError):
        raise ArtifactError(f"{where}: the artifact's sizes are not described") from None
    if not 0 < raw_bytes <= _MAX_RATIO * payload_bytes + 64:
        # the buffer is allocated up front: a size zlib cannot reach is refused, not allocated
        raise ArtifactError(f"{where}: {raw_bytes} raw bytes cannot come from this payload")
    if info.get("compression") == SINGLE_STREAM:
        return max(raw_bytes, 1), [count]
    try:
        piece_bytes = int(info["piece_bytes"])
        piece_chunks = [int(c) for c in info["piece_chunks"]]
    except (KeyError, TypeError, ValueError):
        raise ArtifactError(f"{where}: artifact pieces are not described") from None
    pieces = max(1, -(-raw_bytes // piece_bytes)) if piece_bytes > 0 else -1
    if pieces != len(piece_chunks) or sum(piece_chunks) != count or min(piece_chunks) < 1:
        raise ArtifactError(
            f"{where}: {len(piece_chunks)} pieces of {sum(piece_chunks)} chunks do not fit "
            f"{raw_bytes} raw bytes in pieces of {piece_bytes} and {count} chunks"
        )
    return piece_bytes, piece_chunks


def decompress(
    chunks: Iterable[bytes | None],
    raw_bytes: int,
    piece_bytes: int,
    piece_chunks: Sequence[int],
    where: str,
    workers: int,
    into: memoryview | None = None,
) -> memoryview:
    """The raw payload, in ``into`` (writable, ``raw_bytes`` long) or a new buffer: each piece
    decompressed on the pool as soon as its chunks arrived."""
    view = memoryview(bytearray(raw_bytes)) if into is None else into.cast("B")
    if view.readonly or view.nbytes != raw_bytes:
        raise ValueError(f"the payload needs {raw_bytes} writable bytes, got {view.nbytes}")
    arriving = iter(chunks)
    with ThreadPoolExecutor(workers, thread_name_prefix="catalog-decompress") as pool:
        done: list[Future[None]] = []
        for i, count in enumerate(piece_chunks):
            start = i * piece_bytes
            target = view[start : min(start + piece_bytes, raw_bytes)]
            piece = [next(arriving, b"") for _ in range(count)]
            done.append(pool.submit(_inflate, piece, target, f"{where}: piece {i}"))
        for future in done:
            future.result()
    return view


def _inflate(chunks: list[bytes | None], target: memoryview, where: str) -> None:
    inflater = zlib.decompressobj()
    pos = 0
    try:
        for chunk in chunks:
            if chunk is None:  # a key Redis no longer holds (verify_chunks names which)
                raise ArtifactError(f"{where}: a chunk is missing")
            pos = _put(target, pos, inflater.decompress(chunk, len(target) - pos + 1), where)
            if inflater.unconsumed_tail:
                raise ArtifactError(f"{where}: decompresses past its {len(target)} bytes")
        pos = _put(target, pos, inflater.flush(), where)
    except zlib.error as exc:
        raise ArtifactError(f"{where}: payload does not decompress: {exc}") from None
    if pos != len(target) or not inflater.eof or inflater.unused_data:
        raise ArtifactError(f"{where}: decompresses to {pos} bytes, expected {len(target)}")


def _put(target: memoryview, pos: int, data: bytes, where: str) -> int:
    end = pos + len(data)
    if end > len(target):
        raise ArtifactError(f"{where}: decompresses past its {len(target)} bytes")
    target[pos:end] = data
    return end
