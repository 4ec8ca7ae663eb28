"""Read one version's artifact chunks from Redis and decode them, pipelined.

A fetch thread reads the chunks in batches (one MGET per ``batch_bytes``) and, once it holds
them all, checks their checksums (``codec.verify_chunks``); the calling thread hands each piece
of the payload to a pool of threads as soon as its chunks arrived (``codec.decode_chunks``).
zlib and sha256 release the GIL, so the checksums, the decompression and Redis' replies overlap
instead of running one after another. Errors are the codec's: a missing or corrupt chunk is
reported as such even when the decompression tripped over it first.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import redis

from widebeam.services.catalog.store import codec
from widebeam.services.catalog.store.keys import VersionKeys

DEFAULT_BATCH_BYTES = 16 << 20  # chunk bytes per MGET: small enough to overlap, few round trips
_DONE = object()


def fetch_arrays(
    client: redis.Redis,
    vkeys: VersionKeys,
    info: Mapping[str, Any],
    where: str,
    batch_bytes: int = DEFAULT_BATCH_BYTES,
    into: memoryview | None = None,
) -> dict[str, Any]:
    """The artifact's named arrays (views of one freshly decoded buffer nothing else holds:
    ``into``, ``info["raw_bytes"]`` writable bytes, when given); ArtifactError naming what is
    wrong with it."""
    count, sizes = int(info["chunk_count"]), info["chunk_sizes"]
    batches: queue.SimpleQueue[Any] = queue.SimpleQueue()
    outcome: dict[str, BaseException | None] = {"error": None}

    def fetch_and_verify() -> None:
        chunks: list[bytes | None] = []
        try:
            for keys in _batches(vkeys, count, sizes, batch_bytes):
                batch = client.mget(keys)
                chunks.extend(batch)
                batches.put(batch)
            batches.put(_DONE)
            codec.verify_chunks(chunks, info, where)
        except BaseException as exc:  # handed to the caller, never lost in this thread
            outcome["error"] = exc
            batches.put(_DONE)

    fetcher = threading.Thread(target=fetch_and_verify, name="catalog-fetch", daemon=True)
    fetcher.start()

    def arrived() -> Iterator[bytes]:
        while (batch := batches.get()) is not _DONE:
            yield from batch

    try:
        arrays = codec.decode_chunks(arrived(), info, where, into=into)
    except Exception:
        fetcher.join()
        if outcome["error"] is not None:
            raise outcome["error"] from None  # a missing/corrupt chunk or Redis: the cause
        raise
    fetcher.join()
    if outcome["error"] is not None:
        raise outcome["error"]
    return arrays


def _batches(
    vkeys: VersionKeys, count: int, sizes: Sequence[int], batch_bytes: int
) -> Iterator[list[str]]:
    batch: list[str] = []
    pending = 0
    for i in range(count):
        batch.append(vkeys.chunk(i))
        pending += int(sizes[i])
        if pending >= batch_bytes or i == count - 1:
            yield batch
            batch, pending = [], 0
