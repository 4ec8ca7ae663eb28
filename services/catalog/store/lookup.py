"""Per-version item <-> SID lookup tables: the one module that writes and reads them.

The gateway asks "which SID is item X" and "which items does SID S name" per request, so these
are answered by one GET of a small bucket each instead of loading the whole artifact. Written
in the ``packed/1`` layout (``lookup_layout.py``): numpy packs every bucket, a bulk writer
streams them. Versions published before it (layout ``hash/1``: HASH buckets, one field per
item / SID, ``keys.py``) are still read; a lookup record naming any other layout is rejected.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
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
    """Write both tables; returns the lookup entry recorded in the manifest."""
    num_sids, num_items = len(sids), len(item_offsets) - 1
    sid_sizes = np.diff(sid_item_offsets)  # [num_sids]
    item_buckets = packed.bucket_count(num_items)
    sid_buckets = packed.bucket_count(num_sids)
    by_item = packed.Records(
        codes=np.repeat(sids, sid_sizes, axis=0),
        string_lo=np.arange(num_items, dtype=np.int64),
        string_count=np.ones(num_items, dtype=np.int64),
        blob=item_blob,
        offsets=item_offsets,
    )
    item_bucket = packed.item_hashes(item_blob, item_offsets) % np.uint64(item_buckets)
    by_sid = packed.Records(
        codes=sids,
        string_lo=np.asarray(sid_item_offsets[:-1], dtype=np.int64),
        string_count=sid_sizes.astype(np.int64),
        blob=item_blob,
        offsets=item_offsets,
    )
    sid_bucket = packed.sid_hashes(sids) % np.uint64(sid_buckets)
    with BulkWriter(client) as writer:
        for key_of, records, bucket_of_record, count in (
            (vkeys.item_bucket, by_item, item_bucket, item_buckets),
            (vkeys.sid_bucket, by_sid, sid_bucket, sid_buckets),
        ):
            for b, numeric, blob in packed.pack_buckets(
                records, bucket_of_record.astype(np.int64), count
            ):
                writer.set(key_of(b).encode("utf-8"), (numeric, blob))
    return {
        "layout": packed.LAYOUT,
        "depth": int(sids.shape[1]),
        "item_buckets": item_buckets,
        "sid_buckets": sid_buckets,
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
        where = f"catalog {name!r} version {version}"
        record, raws = self._get(name, version, ITEMS, item_ids)
        if record.get("layout", LEGACY_LAYOUT) == LEGACY_LAYOUT:
            return [None if r is None else tuple(int(c) for c in r.split(b",")) for r in raws]
        out: list[tuple[int, ...] | None] = []
        for key, raw in zip(map(_utf8, item_ids), raws, strict=True):
            bucket = _parse(raw, record, where)
            j = -1 if bucket is None else bucket.find_string(key)
            out.append(None if j < 0 else tuple(bucket.codes[bucket.record_of_string(j)].tolist()))
        return out

    def sid_items(self, name: str, version: int, codes: Sequence[int] | str) -> list[str]:
        """Items whose SID is ``codes``, in trie order; [] when none (or codes are malformed)."""
        try:
            text = sid_key(codes)
        except (TypeError, ValueError):
            return []
        values = [int(c) for c in text.split(",")]
        if min(values) < 0:
            return []
        record, (raw,) = self._get(name, version, SIDS, [values])
        if record.get("layout", LEGACY_LAYOUT) == LEGACY_LAYOUT:
            return [] if raw is None else [str(i) for i in json.loads(raw)]
        bucket = _parse(raw, record, f"catalog {name!r} version {version}")
        r = -1 if bucket is None else bucket.find_codes(values)
        return [] if r < 0 else bucket.strings_of(r)

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
        buckets = int(record["item_buckets" if table == ITEMS else "sid_buckets"])
        pipe = self.client.pipeline(transaction=False)
        pipe.get(vkeys.lookup)
        if record.get("layout", LEGACY_LAYOUT) == LEGACY_LAYOUT:
            key_of = vkeys.items if table == ITEMS else vkeys.sids
            for k in keys:
                field = k if table == ITEMS else sid_key(k)
                pipe.hget(key_of(bucket_of(field, buckets)), field)
        elif table == ITEMS:
            for k in keys:
                pipe.get(vkeys.item_bucket(packed.item_hash(_utf8(k)) % buckets))
        else:
            for k in keys:
                pipe.get(vkeys.sid_bucket(packed.sid_hash(k) % buckets))
        return pipe.execute()


def _utf8(item_id: str) -> bytes:
    # A lone surrogate (never in a catalog: ids are checked at parse) simply matches nothing.
    return item_id.encode("utf-8", "surrogatepass")


def _parse(raw: bytes | None, record: dict[str, Any], where: str) -> packed.Bucket | None:
    if raw is None:
        return None
    try:
        return packed.Bucket.parse(raw, int(record["depth"]))
    except packed.MalformedBucketError as exc:
        raise ArtifactError(f"{where}: lookup bucket is malformed: {exc}") from None
