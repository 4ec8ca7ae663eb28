"""Load a catalog version in a child process and map its arrays into this one.

A 10M-item load is seconds of CPU — fetch, checksums, decompression, content hash — much of it
Python holding the GIL between C calls. In a process that also serves (the decoder), that
starves the serving threads. Here a child interpreter, in Linux's idle scheduling class (it runs
on CPU time nothing else wants; at a lower priority, ``niceness``, where there is none, or once
it waited too long for idle CPU), runs
``CatalogStore.load`` (every check included), decoding the artifact's payload straight into a
file in shared memory (``/dev/shm``, else the temporary directory); this process maps it
read-only (``np.memmap``: no copy; the arrays are views where the payload's layout put them)
and unlinks it at once, so the memory goes when the last array is dropped. The child also
sends the item ids' hash index (``StringTable.hash_index``, what the decoder's item lookups
search), so the serving process does not sort it, and the arrays of the caller's ``derive`` (a
module-level function the child imports by name: the decoder's trie tensors' host arrays), so
the serving process spends no CPU on them. Errors come back as the store's own types.

Run as ``python -m widebeam.services.catalog.store.load_process`` with the request JSON on
stdin (that is what :func:`load_in_child` does); the answer is one JSON line on stdout.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import mmap
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import redis

from widebeam.services.catalog.store import codec
from widebeam.services.catalog.store import types as store_types
from widebeam.services.catalog.store.types import ArtifactError, Derive, LoadedCatalog
from widebeam.services.catalog.trie import SidTrie
from widebeam.services.catalog.types import CatalogError

log = logging.getLogger(__name__)

DEFAULT_NICENESS = 10  # how much lower the child's CPU priority is than this process'
# free space wanted in /dev/shm, in artifact raw sizes: the payload, the hash index and the
# derived arrays (at 10M items 865 + 80 + 400 MB)
_SPACE_MARGIN = 2.0
_PAYLOAD = "payload"  # the decoded artifact (codec.py's raw layout)
_IDLE_MIN_S = 2.0  # the least time a load waits for idle CPU before it runs at its niceness
_IDLE_BYTES_PER_S = 20e6  # artifact bytes a second a load can count on from idle CPU
_HASH_INDEX = "item_id_hash_index"
_DERIVED = "derived."  # file name prefix of the `derive` function's arrays
_DERIVED_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


def load_in_child(
    redis_url: str,
    namespace: str,
    name: str,
    version: int,
    raw_bytes: int,
    niceness: int = DEFAULT_NICENESS,
    timeout_s: float = 600.0,
    derive: Derive | None = None,
    idle_budget_s: float | None = None,
) -> LoadedCatalog:
    """``CatalogStore(...).load(name, version)``, run in a child process.

    ``raw_bytes``: the artifact's decoded size (manifest ``artifact.raw_bytes``), to choose
    where the arrays go. ``derive``: run by the child on the loaded trie; its arrays come back
    as ``LoadedCatalog.derived``. The child first runs in the idle scheduling class for at most
    ``idle_budget_s`` (None: `idle_budget` of the size; 0: not at all); a child that did not
    finish in it (the CPU was kept busy) is stopped and the load run again at ``niceness``, so
    a busy machine delays a load, never starves it. Raises what the load
    raised (``ArtifactError``, ``VersionNotFoundError``; ``redis.ConnectionError`` when the
    child could not reach Redis)."""
    spool = Path(tempfile.mkdtemp(prefix="widebeam-catalog-", dir=_spool_root(raw_bytes)))
    request = {"redis_url": redis_url, "namespace": namespace, "name": name,
               "version": version, "spool": str(spool), "niceness": niceness,
               "parent": os.getpid(), "derive": _import_path(derive)}  # fmt: skip
    if idle_budget_s is None:
        idle_budget_s = idle_budget(raw_bytes)
    started = time.monotonic()
    try:
        done = None
        if idle_budget_s > 0 and hasattr(os, "SCHED_IDLE"):
            done = _run_child(request | {"idle": True}, min(idle_budget_s, timeout_s))
            if done is None:
                log.warning("catalog %r version %d: no idle CPU for %.0f s; loading it at "
                            "niceness %d", name, version, idle_budget_s, niceness)  # fmt: skip
                _empty(spool)
        if done is None:
            left = timeout_s - (time.monotonic() - started)
            done = _run_child(request | {"idle": False}, left)
        if done is None:
            raise RuntimeError(f"catalog load process gave no answer in {timeout_s:.0f} s")
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
        payload = _mapped(spool / _PAYLOAD, {"dtype": "|u1", "shape": [raw_bytes],
                                             "nbytes": raw_bytes})  # fmt: skip
        extra = {key: _mapped(spool / key, spec) for key, spec in answer["arrays"].items()}
        derived = {key: _mapped(spool / f"{_DERIVED}{key}", spec)
                   for key, spec in answer.get("derived", {}).items()}  # fmt: skip
    finally:
        shutil.rmtree(spool, ignore_errors=True)  # mapped arrays stay valid after the unlink
    manifest = answer["manifest"]
    where = f"catalog {name!r} version {version}"
    try:  # checked by the child: the arrays are the verified trie's, as it wrote them
        aligned = manifest["artifact"]["encoding"] == codec.ENCODING
        arrays = codec.split_arrays(memoryview(payload), aligned=aligned) | extra
        trie = SidTrie.from_arrays(
            arrays, dense_cell_budget=int(manifest["dense_cell_budget"]), copy=False
        )
        trie.item_ids.attach_hash_index(arrays[_HASH_INDEX])
    except (CatalogError, ValueError, KeyError, TypeError, struct.error) as exc:
        raise ArtifactError(f"{where}: {exc}") from None
    return LoadedCatalog(name, version, trie, manifest, derived)


def idle_budget(raw_bytes: int) -> float:
    """How long a load may wait for idle CPU: what a busy but not saturated 2-core machine
    needs (a 10M-item, 865 MB artifact loads in 13-17 s there beside serving), twice over."""
    return max(_IDLE_MIN_S, raw_bytes / _IDLE_BYTES_PER_S)


def _run_child(request: dict[str, Any], timeout_s: float) -> subprocess.CompletedProcess | None:
    """The child's run, or None when it did not finish in ``timeout_s`` (it is killed)."""
    try:
        return subprocess.run(
            # The request (its Redis URL may hold a password) goes on stdin, not in argv,
            # where any user of the machine could read it.
            [sys.executable, "-m", __name__], input=json.dumps(request),
            capture_output=True, text=True, timeout=max(timeout_s, 0.001), check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return None


def _empty(spool: Path) -> None:
    """Remove what a stopped child wrote, keeping the folder."""
    for path in spool.iterdir():
        path.unlink(missing_ok=True)


def _mapped(path: Path, spec: dict[str, Any]) -> np.ndarray:
    dtype, shape = np.dtype(spec["dtype"]), tuple(spec["shape"])
    if not spec["nbytes"]:  # np.memmap refuses an empty file
        return np.zeros(shape, dtype=dtype)
    if not shape:  # a scalar: np.memmap would give it shape (1,)
        return np.fromfile(path, dtype=dtype, count=1).reshape(())
    return np.memmap(path, dtype=dtype, mode="r", shape=shape)


def _import_path(derive: Derive | None) -> str | None:
    """``module:function`` of a module-level function, what the child imports; ValueError for
    anything the child could not import by that name (a lambda, a method, a local function)."""
    if derive is None:
        return None
    path = f"{derive.__module__}:{derive.__qualname__}"
    if _resolve(path) is not derive:
        raise ValueError(f"derive must be a module-level function, got {derive!r}")
    return path


def _resolve(path: str) -> Any:
    module, _, qualname = path.partition(":")
    if "." in qualname or "<" in qualname:  # nested or local: not reachable by name
        return None
    return getattr(importlib.import_module(module), qualname, None)


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
    from widebeam.services.catalog.store.store import CatalogStore, verify_content_hash

    _die_with_parent(int(request["parent"]))
    os.nice(int(request["niceness"]))
    if request.get("idle") and hasattr(os, "SCHED_IDLE"):
        # Only CPU time nothing else wants: a nice-10 thread still delays the serving threads'
        # wake-ups on a busy core, and this load keeps two cores busy while it decompresses.
        with contextlib.suppress(OSError):  # a sandbox that refuses it: the niceness stays
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    spool = Path(request["spool"])
    client = redis.Redis.from_url(request["redis_url"], socket_timeout=60)
    try:
        # the payload is decoded straight into the file the serving process maps, and the
        # content hash is checked below, beside the other writes (the answer waits for it)
        loaded = CatalogStore(client, request["namespace"]).load(
            request["name"], int(request["version"]), verify_content=False,
            payload_buffer=lambda size: _shared_buffer(spool / _PAYLOAD, size),
        )  # fmt: skip
    except store_types.CatalogStoreError as exc:
        return {"error": type(exc).__name__, "message": str(exc)}
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        return {"error": "RedisConnectionError", "message": str(exc)}
    finally:
        client.close()
    # Two threads derive (and write what they derived) and check the content hash while this
    # one sorts the hash index (numpy, sha256 and file writes release the GIL): on two cores
    # that overlap is seconds of a 10M-item load.
    derive = _resolve(request["derive"]) if request.get("derive") else None
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="load-child") as pool:
        # the longest chain first: deriving, then writing what it derived
        derived = (
            pool.submit(_derived_spooled, derive, loaded.trie, spool)
            if derive is not None
            else None
        )
        verified = pool.submit(verify_content_hash, loaded)
        # the item ids' hash index too (the decoder's item lookups): its sort is work this
        # process can spare the serving one
        index_specs = _spooled({_HASH_INDEX: loaded.trie.item_ids.hash_index}, spool, "")
        try:
            verified.result()
        except store_types.CatalogStoreError as exc:
            return {"error": type(exc).__name__, "message": str(exc)}
        answer = {"manifest": loaded.manifest, "arrays": index_specs}
        if derived is not None:
            answer["derived"] = derived.result()
    return answer


def _shared_buffer(path: Path, size: int) -> memoryview:
    """``size`` writable bytes backed by the file at ``path`` (in shared memory: the pages
    the serving process maps are the ones written here)."""
    with path.open("w+b") as file:
        file.truncate(size)
        return memoryview(mmap.mmap(file.fileno(), size))


def _derived_spooled(derive: Derive, trie: SidTrie, spool: Path) -> dict[str, Any]:
    arrays = derive(trie)
    bad = [key for key in arrays if not _DERIVED_NAME.fullmatch(key)]
    if bad:
        raise ValueError(f"derived array names must be identifiers, got {bad[:3]}")
    return _spooled(arrays, spool, _DERIVED)


def _spooled(arrays: dict[str, np.ndarray], spool: Path, prefix: str) -> dict[str, Any]:
    """Writes each array to ``spool/prefix+name``; returns their dtypes and shapes."""
    specs = {}
    for key, array in arrays.items():
        contiguous = np.asarray(array)  # (np.ascontiguousarray would make a scalar 1-d)
        if not contiguous.flags.c_contiguous:
            contiguous = contiguous.copy(order="C")
        if contiguous.nbytes:
            contiguous.tofile(spool / f"{prefix}{key}")
        specs[key] = {"dtype": contiguous.dtype.str, "shape": list(contiguous.shape),
                      "nbytes": int(contiguous.nbytes)}  # fmt: skip
    return specs


if __name__ == "__main__":
    print(json.dumps(_child(json.loads(sys.stdin.read()))))
