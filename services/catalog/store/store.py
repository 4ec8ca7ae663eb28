"""CatalogStore: publish immutable, versioned SID-trie artifacts to Redis and read them back.

Protocol (docs/DESIGN "Catalog publish protocol"): chunks and lookup tables are written under a
fresh version number, then one Lua script commits the manifest, moves ``current`` and appends a
change event. Key layout: ``keys.py``; manifest fields: ``manifest.py``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import redis

from widebeam.services.catalog.store import codec, lookup, retention, scripts
from widebeam.services.catalog.store.artifact_fetch import fetch_arrays
from widebeam.services.catalog.store.eviction import require_no_eviction
from widebeam.services.catalog.store.keys import (
    CatalogKeys,
    NamespaceKeys,
    VersionKeys,
    validate_namespace,
)
from widebeam.services.catalog.store.manifest import build_manifest, check_metadata, lookup_record
from widebeam.services.catalog.store.types import (
    ArtifactError,
    LoadedCatalog,
    PublishedVersion,
    StagingLostError,
    VersionNotFoundError,
)
from widebeam.services.catalog.trie import SidTrie
from widebeam.services.catalog.types import CatalogError

log = logging.getLogger(__name__)

DEFAULT_CHUNK_BYTES = 4 << 20
_PIPELINE_BYTES = 64 << 20  # chunk bytes per round trip when writing


class CatalogStore:
    """Versioned catalogs in Redis. Thread-safe as far as the given client is (redis-py is).

    ``client`` must return bytes (``decode_responses=False``).
    """

    def __init__(
        self,
        client: redis.Redis,
        namespace: str = "widebeam",
        retain: int = 5,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        compress_level: int = 1,
        staging_ttl_s: float = 3600.0,
        stream_maxlen: int = 10_000,
        write_retry_s: float = 10.0,
    ) -> None:
        if client.get_encoder().decode_responses:
            raise ValueError("CatalogStore needs a redis client with decode_responses=False")
        if retain < 1:
            raise ValueError(f"retain must be >= 1, got {retain}")
        if not 0 < chunk_bytes <= 256 << 20:
            raise ValueError(f"chunk_bytes must be in 1..{256 << 20}, got {chunk_bytes}")
        self.client = client
        self.namespace = validate_namespace(namespace)
        self.retain = retain
        self.chunk_bytes = chunk_bytes
        self.compress_level = compress_level
        self.staging_ttl_s = staging_ttl_s
        self.stream_maxlen = stream_maxlen
        # How long a publish keeps rewriting its staged artifact while Redis is unreachable
        # (a restart, a failover) before it gives up.
        self.write_retry_s = write_retry_s
        self.keys = NamespaceKeys(self.namespace)
        self._stage = client.register_script(scripts.STAGE)
        self._commit = client.register_script(scripts.COMMIT)
        self._activate = client.register_script(scripts.ACTIVATE)
        self._retire = client.register_script(scripts.RETIRE)
        self._lookups = lookup.LookupReader(client, self.keys)

    # -- writing ------------------------------------------------------------------------------

    def publish(
        self,
        name: str,
        trie: SidTrie,
        metadata: dict[str, Any] | None = None,
        activate: bool = True,
    ) -> PublishedVersion:
        """Store ``trie`` as a new version and make it current (unless a newer one already is,
        or ``activate`` is false: then it is kept, complete, for a later ``activate``)."""
        self.keys.catalog(name)  # rejects a bad name before any work
        meta = check_metadata(metadata)
        require_no_eviction(self.client)  # per publish: the policy can change at run time
        # The artifact's arrays are built once: they are both what is compressed and what the
        # lookup tables are packed from. zlib and sha256 release the GIL, so the artifact is
        # compressed on a second core while this thread packs the lookup tables.
        arrays = trie.to_arrays()
        with ThreadPoolExecutor(1, thread_name_prefix="catalog-encode") as encoder:
            encoded = encoder.submit(
                codec.encode_chunks, arrays, self.chunk_bytes, self.compress_level
            )
            return self._publish(name, trie, arrays, meta, activate, encoded)

    def _publish(
        self,
        name: str,
        trie: SidTrie,
        arrays: dict[str, np.ndarray],
        meta: dict[str, Any],
        activate: bool,
        encoded: Future[tuple[list[bytes], dict[str, Any]]],
    ) -> PublishedVersion:
        ckeys = self.keys.catalog(name)
        version = int(
            self._stage(keys=[ckeys.seq, ckeys.staging, ckeys.versions], args=[time.time()])
        )
        vkeys = ckeys.version(version)
        try:
            buckets, artifact = self._write_staged(vkeys, encoded, arrays)
            manifest = build_manifest(name, version, trie, artifact, buckets, meta)
            keys = [vkeys.manifest, vkeys.lookup, ckeys.versions, ckeys.current]
            keys += [self.keys.catalogs, self.keys.events, ckeys.staging]
            manifest_json = json.dumps(manifest, separators=(",", ":"))
            record_json = json.dumps(lookup_record(manifest))
            args = [manifest_json, record_json, version, name, self.stream_maxlen, int(activate)]
            try:
                moved = self._commit(keys=keys, args=args)
            except redis.ResponseError as exc:
                # The client retries a command whose connection broke (a Redis restart): the
                # first attempt may have committed before the reply was lost, and the repeat
                # then finds the staging entry gone. Committed is committed.
                if "STAGING_LOST" not in str(exc) or not self._committed(ckeys, version):
                    raise
                moved = self.current_version(name) == version
        except redis.ResponseError as exc:
            if "STAGING_LOST" not in str(exc):
                self._discard(ckeys.staging, vkeys, version)
                raise
            self._discard_lost(ckeys, vkeys, version)
            raise StagingLostError(
                f"catalog {name!r} version {version}: the catalog store lost the publish's "
                "state before the commit (Redis lost its data: a restart without persistence, "
                "a flush or a failover; or the publish took longer than "
                f"staging_ttl_s={self.staging_ttl_s}); nothing was made current, publish again"
            ) from None
        except BaseException:
            self._discard(ckeys.staging, vkeys, version)
            raise
        try:
            retention.prune(self.client, ckeys, self.retain, self.staging_ttl_s, self._retire)
        except redis.RedisError as exc:
            # The version is committed; failing the publish now would make a client publish it
            # again. Retention is housekeeping: the next publish (or prune()) catches up.
            log.warning("catalog %r: retention after version %d failed: %s", name, version, exc)
        return PublishedVersion(name, version, trie.content_hash, bool(moved), manifest)

    def _committed(self, ckeys: CatalogKeys, version: int) -> bool:
        """Whether `version` is a committed, complete version (its manifest and its entry in
        the versions set are written by the same COMMIT script)."""
        with self.client.pipeline(transaction=True) as pipe:
            pipe.exists(ckeys.version(version).manifest).zscore(ckeys.versions, str(version))
            exists, score = pipe.execute()
        return bool(exists) and score is not None

    def activate(self, name: str, version: int) -> None:
        """Point ``current`` at an existing complete version (rollback / roll-forward)."""
        ckeys = self.keys.catalog(name)
        vkeys = ckeys.version(version)
        ok = self._activate(
            keys=[vkeys.manifest, ckeys.versions, ckeys.current, self.keys.events],
            args=[int(version), name, self.stream_maxlen],
        )
        if not ok:
            raise VersionNotFoundError(f"catalog {name!r} has no complete version {version}")

    def prune(self, name: str) -> list[int]:
        """Apply retention now (publish does this too); returns the deleted versions."""
        ckeys = self.keys.catalog(name)
        return retention.prune(self.client, ckeys, self.retain, self.staging_ttl_s, self._retire)

    def _write_staged(
        self,
        vkeys: VersionKeys,
        encoded: Future[tuple[list[bytes], dict[str, Any]]],
        arrays: dict[str, np.ndarray],
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Write the version's lookup tables and chunks; returns the lookup bucket counts and
        the artifact's manifest entry.

        Nothing reads a staged version, and every write sets a fixed value (SET, HSET), so on
        a lost connection the whole phase is written again from the start, with backoff, for
        up to `write_retry_s`: a Redis restart delays the publish instead of failing it. (The
        bulk lookup writer streams on one raw connection, outside redis-py's own retries.)"""
        deadline = time.monotonic() + self.write_retry_s
        delay = 0.05
        while True:
            try:
                buckets = lookup.write_lookups(
                    self.client,
                    vkeys,
                    arrays["sids"],
                    arrays["sid_item_offsets"],
                    arrays["item_id_bytes"],
                    arrays["item_id_offsets"],
                )
                chunks, artifact = encoded.result()
                self._write_chunks(vkeys, chunks)
                return buckets, artifact
            except (redis.ConnectionError, redis.TimeoutError) as exc:
                if time.monotonic() + delay > deadline:
                    raise
                log.warning("%s: Redis unreachable (%s); writing again", vkeys.prefix, exc)
                time.sleep(delay)
                delay = min(1.0, delay * 2)

    def _write_chunks(self, vkeys: VersionKeys, chunks: Sequence[bytes]) -> None:
        pipe = self.client.pipeline(transaction=False)
        pending = 0
        for i, chunk in enumerate(chunks):
            pipe.set(vkeys.chunk(i), chunk)
            pending += len(chunk)
            if pending >= _PIPELINE_BYTES:
                pipe.execute()
                pending = 0
        pipe.execute()

    def _discard(self, staging: str, vkeys: VersionKeys, version: int) -> None:
        # Best effort: if Redis is unreachable, the staging GC in prune() cleans up later.
        try:
            if self.client.zrem(staging, str(version)):
                retention.unlink_version(self.client, vkeys)
        except redis.RedisError:
            pass

    def _discard_lost(self, ckeys: CatalogKeys, vkeys: VersionKeys, version: int) -> None:
        """Remove what the publish wrote after its staging entry vanished (into an emptied
        Redis, or after the staging GC ran): no staging entry means no collector will. Only
        while the version is neither staged nor committed, so never another publish's data."""
        try:
            staged = self.client.zscore(ckeys.staging, str(version)) is not None
            if not staged and not self._committed(ckeys, version):
                retention.unlink_version(self.client, vkeys)
        except redis.RedisError:
            pass

    # -- reading ------------------------------------------------------------------------------

    def list_catalogs(self) -> list[str]:
        return sorted(m.decode() for m in self.client.smembers(self.keys.catalogs))

    def list_versions(self, name: str) -> list[int]:
        """Committed versions, ascending."""
        return [int(v) for v in self.client.zrange(self.keys.catalog(name).versions, 0, -1)]

    def current_version(self, name: str) -> int | None:
        raw = self.client.get(self.keys.catalog(name).current)
        return None if raw is None else int(raw)

    def manifest(self, name: str, version: int) -> dict[str, Any]:
        raw = self.client.get(self.keys.catalog(name).version(version).manifest)
        if raw is None:
            raise VersionNotFoundError(f"catalog {name!r} has no complete version {version}")
        return json.loads(raw)

    def current_ref(self, name: str) -> tuple[int, str] | None:
        """(current version, its artifact_id) from two small keys; None when nothing is current."""
        version = self.current_version(name)
        if version is None:
            return None
        raw = self.client.get(self.keys.catalog(name).version(version).lookup)
        return None if raw is None else (version, str(json.loads(raw)["artifact_id"]))

    def load(
        self,
        name: str,
        version: int | None = None,
        verify_content: bool = True,
        payload_buffer: Callable[[int], memoryview] | None = None,
    ) -> LoadedCatalog:
        """Fetch, verify (chunk checksums, content hash) and rebuild a version (None = current).
        ``verify_content=False`` leaves the content hash to the caller (`verify_content_hash`),
        who may run it beside other work: until then the version is not to be served.
        ``payload_buffer(raw_bytes)``: the writable buffer the payload is decoded into (the
        trie's arrays are views of it; default a new one)."""
        version = self._resolve(name, version)
        manifest = self.manifest(name, version)
        vkeys = self.keys.catalog(name).version(version)
        info = manifest["artifact"]
        where = f"catalog {name!r} version {version}"
        into = None if payload_buffer is None else payload_buffer(int(info["raw_bytes"]))
        arrays = fetch_arrays(self.client, vkeys, info, where, into=into)
        budget = int(manifest["dense_cell_budget"])
        try:
            # the decoded buffer is this load's alone: the trie may keep views of it (when
            # the payload's arrays are aligned; see unpack_arrays)
            trie = SidTrie.from_arrays(arrays, dense_cell_budget=budget, copy=False)
        except CatalogError as exc:
            raise ArtifactError(f"{where}: {exc}") from None
        loaded = LoadedCatalog(name, version, trie, manifest)
        if verify_content:
            verify_content_hash(loaded)
        return loaded

    def _resolve(self, name: str, version: int | None) -> int:
        if version is not None:
            return int(version)
        current = self.current_version(name)
        if current is None:
            raise VersionNotFoundError(f"catalog {name!r} has no current version")
        return current

    # -- item / SID lookups -------------------------------------------------------------------

    def item_sid(self, name: str, version: int | None, item_id: str) -> tuple[int, ...] | None:
        """SID codes of ``item_id`` in that version (None = current); None when absent."""
        return self.item_sids(name, version, [item_id])[0]

    def item_sids(
        self, name: str, version: int | None, item_ids: Sequence[str]
    ) -> list[tuple[int, ...] | None]:
        """Batch form of :meth:`item_sid` (one round trip in the common case)."""
        return self._lookups.item_sids(name, self._resolve(name, version), item_ids)

    def sid_items(self, name: str, version: int | None, codes: Sequence[int] | str) -> list[str]:
        """Items whose SID is ``codes`` (ints or ``"c0,c1,..."``), in trie order; [] if none."""
        return self._lookups.sid_items(name, self._resolve(name, version), codes)


def verify_content_hash(loaded: LoadedCatalog) -> None:
    """ArtifactError unless the rebuilt trie's content hash is the one its manifest names."""
    if loaded.trie.content_hash != loaded.manifest["content_hash"]:
        where = f"catalog {loaded.name!r} version {loaded.version}"
        raise ArtifactError(f"{where}: rebuilt trie's content hash differs from the manifest")
