"""Load a catalog version in a child process and map its arrays into this one.

A 10M-item load is seconds of CPU — fetch, checksums, decompression, content hash — much of it
Python holding the GIL between C calls. In a process that also serves (the decoder), that
starves the serving threads. Here a child interpreter, at a lower CPU priority, runs
``CatalogStore.load`` (every check included) and writes the verified trie's arrays to files
in shared memory (``/dev/shm``, else the temporary directory); this process maps them
read-only (``np.memmap``: no copy, no per-array work) and unlinks them at once, so the
memory goes when the last array is dropped. The child also sends the item ids' hash index
(``StringTable.hash_index``, what the decoder's item lookups search), so the serving process
does not sort it. Errors come back as the store's own types.

Run as ``python -m widebeam.services.catalog.store.load_process`` with the request JSON on
stdin (that is what :func:`load_in_child` does); the answer is one JSON line on stdout.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import redis

from widebeam.services.catalog.store import types as store_types
from widebeam.services.catalog.store.types import ArtifactError, LoadedCatalog
from widebeam.services.catalog.trie import SidTrie
from widebeam.services.catalog.types import CatalogError

log = logging.getLogger(__name__)

DEFAULT_NICENESS = 10  # how much lower the child's CPU priority is than this process'
_SPACE_MARGIN = 1.25  # free space wanted in /dev/shm beyond the artifact's raw size
_HASH_INDEX = "item_id_hash_index"


def load_in_child(
    redis_url: str,
    namespace: str,
    name: str,
    version: int,
    raw_bytes: int,
    niceness: int = DEFAULT_NICENESS,
    timeout_s: float = 600.0,
) -> LoadedCatalog:
    """``CatalogStore(...).load(name, version)``, run in a child process.

    ``raw_bytes``: the artifact's decoded size (manifest ``artifact.raw_bytes``), to choose
    where the arrays go. Raises what the load raised (``ArtifactError``,
    ``VersionNotFoundError``; ``redis.ConnectionError`` when the child could not reach Redis)."""
    spool = Path(tempfile.mkdtemp(prefix="widebeam-catalog-", dir=_spool_root(raw_bytes)))
    request = {"redis_url": redis_url, "namespace": namespace, "name": name,
               "version": version, "spool": str(spool), "niceness": niceness,
               "parent": os.getpid()}  # fmt: skip
    started = time.monotonic()
    try:
        done = subprocess.run(
            # The request (its Redis URL may hold a password) goes on stdin, not in argv,
            # where any user of the machine could read it.
            [sys.executable, "-m", __name__], input=json.dumps(request),
            capture_output=True, text=True, timeout=timeout_s, check=False,
        )  # fmt: skip
        lines = done.stdout.strip().splitlines()
        if not lines:
            raise RuntimeError(
                f"catalog load process exited with {done.returncode} and no answer: "
                f"{done.stderr.strip()[-2000:]}"
            )
        answer = json.loads(lines[-1])
        if "error" in answer:
            raise _error(answer["error"], answer["message"])
        log.info("catalog %r version %d loaded by a child process in %.1f s; mapping it",
                 name, version, time.monotonic() - started)  # fmt: skip
        arrays = {
            key: np.memmap(spool / key, dtype=np.dtype(spec["dtype"]), mode="r",
                           shape=tuple(spec["shape"])) if spec["nbytes"] else
                 np.zeros(spec["shape"], dtype=np.dtype(spec["dtype"]))
            for key, spec in answer["arrays"].items()
        }  # fmt: skip
    finally:
        shutil.rmtree(spool, ignore_errors=True)  # mapped arrays stay valid after the unlink
    manifest = answer["manifest"]
    where = f"catalog {name!r} version {version}"
    try:  # checked by the child: the arrays are the verified trie's, as it wrote them
        trie = SidTrie.from_arrays(
            arrays, dense_cell_budget=int(manifest["dense_cell_budget"]), copy=False
        )
        trie.item_ids.attach_hash_index(arrays[_HASH_INDEX])
    except (CatalogError, ValueError, KeyError) as exc:
        raise ArtifactError(f"{where}: {exc}") from None
    return LoadedCatalog(name, version, trie, manifest)


def _spool_root(raw_bytes: int) -> str:
    shm = "/dev/shm"
    try:
        if shutil.disk_usage(shm).free > raw_bytes * _SPACE_MARGIN:
            return shm
    except OSError:
        pass
    return tempfile.gettempdir()


def _error(kind: str, message: str) -> Exception:
    if kind == "RedisConnectionError":
        return redis.ConnectionError(message)
    error_type = getattr(store_types, kind, None)
    if isinstance(error_type, type) and issubclass(error_type, store_types.CatalogStoreError):
        return error_type(message)
    return RuntimeError(f"catalog load process: {kind}: {message}")


def _die_with_parent(parent: int) -> None:
    """Linux: be killed when the parent dies, so a dead decoder's load never writes ~1 GB into
    shared memory that nobody would remove; then check it has not died already."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        sys.exit(1)


def _child(request: dict[str, Any]) -> dict[str, Any]:
    from widebeam.services.catalog.store.store import CatalogStore

    _die_with_parent(int(request["parent"]))
    os.nice(int(request["niceness"]))
    client = redis.Redis.from_url(request["redis_url"], socket_timeout=60)
    try:
        loaded = CatalogStore(client, request["namespace"]).load(
            request["name"], int(request["version"])
        )
    except store_types.CatalogStoreError as exc:
        return {"error": type(exc).__name__, "message": str(exc)}
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        return {"error": "RedisConnectionError", "message": str(exc)}
    finally:
        client.close()
    spool = Path(request["spool"])
    specs = {}
    # the item ids' hash index too (the decoder's item lookups): its sort is work this
    # process can spare the serving one
    arrays = loaded.trie.to_arrays() | {_HASH_INDEX: loaded.trie.item_ids.hash_index}
    for key, array in arrays.items():
        contiguous = np.ascontiguousarray(array)
        if contiguous.nbytes:
            contiguous.tofile(spool / key)
        specs[key] = {"dtype": contiguous.dtype.str, "shape": list(contiguous.shape),
                      "nbytes": int(contiguous.nbytes)}  # fmt: skip
    return {"manifest": loaded.manifest, "arrays": specs}


if __name__ == "__main__":
    print(json.dumps(_child(json.loads(sys.stdin.read()))))
