"""Artifacts as widebeam published them before pieces and alignment (``wbarrays/1``,
compression ``zlib``): the arrays back to back after the header, one zlib stream over it all.
Written here independently of the codec, so the tests hold the old layout fixed."""

from __future__ import annotations

import hashlib
import json
import struct
import zlib
from typing import Any

import numpy as np

from widebeam.services.catalog.store import CatalogStore, codec


def old_single_stream(
    arrays: dict[str, np.ndarray], chunk_bytes: int
) -> tuple[list[bytes], dict[str, Any]]:
    """(chunks, manifest ``artifact`` info) of ``arrays`` in the old layout."""
    little = {k: np.ascontiguousarray(a, a.dtype.newbyteorder("<")) for k, a in arrays.items()}
    entries = [{"name": k, "dtype": a.dtype.str, "shape": list(a.shape), "nbytes": a.nbytes}
               for k, a in little.items()]  # fmt: skip
    header = json.dumps({"arrays": entries}).encode()
    raw = codec.MAGIC + struct.pack("<Q", len(header)) + header
    raw += b"".join(a.tobytes() for a in little.values())
    packed = zlib.compress(raw, 1)
    chunks = [packed[i : i + chunk_bytes] for i in range(0, len(packed), chunk_bytes)]
    info = {
        "encoding": "wbarrays/1", "compression": "zlib", "raw_bytes": len(raw),
        "payload_bytes": len(packed), "payload_sha256": hashlib.sha256(packed).hexdigest(),
        "chunk_count": len(chunks), "chunk_sizes": [len(c) for c in chunks],
        "chunk_sha256": [hashlib.sha256(c).hexdigest() for c in chunks],
    }  # fmt: skip
    return chunks, info


def rewrite_as_old(store: CatalogStore, name: str, version: int, chunk_bytes: int) -> None:
    """Replace a published version's artifact by the same trie in the old layout."""
    vkeys = store.keys.catalog(name).version(version)
    manifest = store.manifest(name, version)
    trie = store.load(name, version).trie
    chunks, info = old_single_stream(trie.to_arrays(), chunk_bytes)
    store.client.delete(*(vkeys.chunk(i) for i in range(manifest["artifact"]["chunk_count"])))
    for i, chunk in enumerate(chunks):
        store.client.set(vkeys.chunk(i), chunk)
    manifest["artifact"] = info
    store.client.set(vkeys.manifest, json.dumps(manifest))
