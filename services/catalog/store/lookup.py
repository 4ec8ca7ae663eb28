"""Per-version item <-> SID lookup tables: the one module that writes and reads them.

The gateway asks "which SID is item X" and "which items does SID S name" per request, so these
are answered by two round trips of small GETs (the hash bucket, then the names bucket holding
the ids) instead of loading the whole artifact. Written in the ``packed/1`` layout
(``lookup_layout.py``): numpy sorts and slices every table, a bulk writer streams the buckets.
Versions published before it (layout ``hash/1``: HASH buckets, one field per item / SID,
``keys.py``) are still read; a lookup record naming any other layout is rejected.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import redis

from widebeam.services.catalog.store import lookup_layout as packed
from widebeam.services.catalog.store.keys import NamespaceKeys, VersionKeys, bucket_of, sid_key
from widebeam.services.catalog.store.resp import BulkWriter
from widebeam.services.catalog.store.types import ArtifactError, VersionNotFoundError

LEGACY_LAYOUT = "hash/1"  # what a lookup record without a "layout" field was written in
ITEMS, SIDS = "items", "sids"


def write_lookups(
    client: redis.Redis,
    vkeys: VersionKeys,
    sids: np.ndarray,  # [num_sids, L] int32, trie order
    sid_item_offsets: np.ndarray,  # [num_sids+1] int64
    item_blob: np.ndarray,  # [bytes] uint8, item ids in trie order, UTF-8
    item_offsets: np.ndarray,  # [num_items+1] int64
) -> dict[str, Any]:
    """Write the three tables; returns the lookup entry recorded in the manifest."""

    def pack() -> Iterator[packed.Packed]:
        yield packed.pack_items(packed.item_hashes(item_blob, item_offsets), sids, sid_item_offsets)
        yield packed.pack_sids(packed.sid_hashes(sids), sids, sid_item_offsets)

    # numpy releases the GIL: the hash tables are packed on a second thread while this one
    # streams the names buckets (which need no hashing) and waits on Redis' replies.
    with ThreadPoolExecutor(1, thread_name_prefix="catalog-lookups") as pool:
        tables = pack()
        items_future = pool.submit(next, tables)
        with BulkWriter(client) as writer:
            for k, lengths, blob in packed.name_buckets(item_blob, item_offsets):
                writer.set(vkeys.name_bucket(k).encode("utf-8"), (lengths, blob))
            items = items_future.result()
            sids_future = pool.submit(next, tables)
            for b, value in items.buckets():
                writer.set(vkeys.item_bucket(b).encode("utf-8"), (value,))
            by_sid = sids_future.result()
            for b, value in by_sid.buckets():
                writer.set(vkeys.sid_bucket(b).encode("utf-8"), (value,))
    return {
        "layout": packed.LAYOUT,
        "depth": int(sids.shape[1]),
        "num_items": len(item_offsets) - 1,
        "item_buckets": 1 << items.bits,  # powers of two: a bucket is its hashes' top bits
        "sid_buckets": 1 << by_sid.bits,
        "names_per_bucket": packed.NAMES_PER_BUCKET,
    }


class LookupReader:
    """Point queries against a version's lookup tables, caching its lookup record."""

    def __init__(self, client: redis.Redis, keys: NamespaceKeys) -> None:
        self.client = client
        self.keys = keys
        # (name, version) -> lookup record; re-validated against the stored one on every query
        # because a version number can be reused after Redis lost its data.
        self._cache: dict[tuple[str, int], dict[str, Any]] = {}

    def item_sids(
        self, name: str, version: int, item_ids: Sequence[str]
    ) -> list[tuple[int, ...] | None]:
        """SID codes of each item (None when the version has no such item)."""
        record, raws = self._get(name, version, ITEMS, item_ids)
        if record.get("layout", LEGACY_LAYOUT) == LEGACY_LAYOUT:
            return [None if r is None else tuple(int(c) for c in r.split(b",")) for r in raws]
        where = f"catalog {name!r} version {version}"
        keys = list(map(_utf8, item_ids))
        words = 2 + int(record["depth"])
        # candidates: (query, position, codes) whose stored hash matches the query's
        candidates: list[tuple[int, int, tuple[int, ...]]] = []
        for q, (key, raw) in enumerate(zip(keys, raws, strict=True)):
            if raw is None:
                continue
            rows = _records(raw, words, where)
            for row in rows[rows[:, 0] == packed.item_hash(key) >> 32].tolist():
                codes = tuple(np.array(row[2:], dtype=np.uint32).view(np.int32).tolist())
                candidates.append((q, row[1], codes))
        names = self._names(name, version, record, {pos for _, pos, _ in candidates}, where)
        out: list[tuple[int, ...] | None] = [None] * len(keys)
        for q, pos, codes in candidates:
            if names.get(pos) == keys[q]:
                out[q] = codes
        return out

    def sid_items(self, name: str, version: int, codes: Sequence[int] | str) -> list[str]:
        """Items whose SID is ``codes``, in trie order; [] when none (or codes are malformed)."""
        try:
            text = sid_key(codes)
        except (TypeError, ValueError):
            return []
        values = [int(c) for c in text.split(",")]
        if min(values) < 0 or max(values) > packed.MAX_CODE:
            return []
        record, (raw,) = self._get(name, version, SIDS, [values])
        if record.get("layout", LEGACY_LAYOUT) == LEGACY_LAYOUT:
            return [] if raw is None else [str(i) for i in json.loads(raw)]
        where = f"catalog {name!r} version {version}"
        if raw is None or len(values) != int(record["depth"]):
            return []
        rows = _records(raw, 3 + len(values), where)
        want = np.array(values, dtype=np.int32).view(np.uint32)
        hit = np.flatnonzero((rows[:, 3:] == want).all(axis=1))
        if not len(hit):
            return []
        lo, count = int(rows[hit[0], 1]), int(rows[hit[0], 2])
        names = self._names(name, version, record, set(range(lo, lo + count)), where)
        try:
            return [names[p].decode("utf-8") for p in range(lo, lo + count)]
        except (KeyError, UnicodeDecodeError):
            raise ArtifactError(f"{where}: lookup names of SID {text} are missing") from None

    def _names(
        self, name: str, version: int, record: dict[str, Any], positions: set[int], where: str
    ) -> dict[int, bytes]:
        """Item ids (UTF-8) at these trie positions, one GET per names bucket holding any."""
        per = int(record["names_per_bucket"])
        n = int(record["num_items"])
        wanted = sorted({p // per for p in positions if 0 <= p < n})
        if not wanted:
            return {}
        vkeys = self.keys.catalog(name).version(version)
        raws = self.client.mget([vkeys.name_bucket(k) for k in wanted])
        out: dict[int, bytes] = {}
        for k, raw in zip(wanted, raws, strict=True):
            if raw is None:
                raise ArtifactError(f"{where}: lookup names bucket {k} is missing")
            try:
                ids = packed.parse_names(raw, min(per, n - k * per))
            except packed.MalformedBucketError as exc:
                raise ArtifactError(f"{where}: lookup bucket is malformed: {exc}") from None
            out.update(enumerate(ids, start=k * per))
        return out

    def _get(
        self, name: str, version: int, table: str, keys: Sequence[Any]
    ) -> tuple[dict[str, Any], list[bytes | None]]:
        """(lookup record, raw bucket values for ``keys``) in one round trip when cached."""
        vkeys = self.keys.catalog(name).version(version)
        cached = self._cache.get((name, version))
        # The lookup record rides along in the same round trip: it proves the version is still
        # complete and that the cached bucket counts belong to this very artifact.
        if cached is not None:
            record_raw, *values = self._fetch(vkeys, table, keys, cached)
            if record_raw is not None and json.loads(record_raw) == cached:
                return cached, values
        record_raw = self.client.get(vkeys.lookup)
        if record_raw is None:
            self._cache.pop((name, version), None)
            raise VersionNotFoundError(f"catalog {name!r} has no complete version {version}")
        record = json.loads(record_raw)
        layout = record.get("layout", LEGACY_LAYOUT)
        if layout not in (LEGACY_LAYOUT, packed.LAYOUT):
            raise ArtifactError(
                f"catalog {name!r} version {version}: lookup layout {layout!r} is not one this "
                f"widebeam reads ({LEGACY_LAYOUT!r}, {packed.LAYOUT!r}); upgrade the reader or "
                "publish the catalog again"
            )
        if len(self._cache) > 1024:
            self._cache.clear()
        self._cache[(name, version)] = record
        return record, self._fetch(vkeys, table, keys, record)[1:]

    def _fetch(
        self, vkeys: VersionKeys, table: str, keys: Sequence[Any], record: dict[str, Any]
    ) -> list[bytes | None]:
        pipe = self.client.pipeline(transaction=False)
        pipe.get(vkeys.lookup)
        if record.get("layout", LEGACY_LAYOUT) == LEGACY_LAYOUT:
            buckets = int(record["item_buckets" if table == ITEMS else "sid_buckets"])
            key_of = vkeys.items if table == ITEMS else vkeys.sids
            for k in keys:
                field = k if table == ITEMS else sid_key(k)
                pipe.hget(key_of(bucket_of(field, buckets)), field)
        elif table == ITEMS:
            bits = int(record["item_buckets"]).bit_length() - 1
            for k in keys:
                h = packed.item_hash(_utf8(k))
                pipe.get(vkeys.item_bucket(packed.bucket_of_hash(h, bits)))
        else:
            bits = int(record["sid_buckets"]).bit_length() - 1
            for k in keys:
                pipe.get(vkeys.sid_bucket(packed.bucket_of_hash(packed.sid_hash(k), bits)))
        return pipe.execute()


def _utf8(item_id: str) -> bytes:
    # A lone surrogate (never in a catalog: ids are checked at parse) simply matches nothing.
    return item_id.encode("utf-8", "surrogatepass")


def _records(raw: bytes, words: int, where: str) -> np.ndarray:
    try:
        return packed.parse_records(raw, words)
    except packed.MalformedBucketError as exc:
        raise ArtifactError(f"{where}: lookup bucket is malformed: {exc}") from None
