"""Per-version item <-> SID lookup tables in bucketed Redis HASHes (layout: ``keys.py``).

The gateway asks "which SID is item X" and "which items does SID S name" per request, so these
are answered by one HGET each instead of loading the whole artifact.
"""

from __future__ import annotations

import itertools
import json
import zlib
from collections.abc import Callable, Sequence
from json.encoder import encode_basestring  # C-accelerated string escaper
from typing import Any

import numpy as np
import redis

from widebeam.services.catalog.store.keys import NamespaceKeys, VersionKeys, bucket_of
from widebeam.services.catalog.store.resp import BulkHashWriter
from widebeam.services.catalog.store.types import VersionNotFoundError
from widebeam.services.catalog.trie import SidTrie

FIELDS_PER_BUCKET = 64  # well under hash-max-listpack-entries (128) even for unlucky buckets


def bucket_count(n: int) -> int:
    return max(1, -(-n // FIELDS_PER_BUCKET))


def _write(
    client: redis.Redis,
    key_of: Callable[[int], str],
    keys: list[bytes],
    values: list[bytes],
    buckets: int,
) -> None:
    """HSET every (key, value) into its bucket's HASH."""
    # Sorting bucket ids with numpy groups the fields without a Python dict per bucket; the
    # fields are put in bucket order once, so each bucket is a slice.
    ids = np.fromiter(map(zlib.crc32, keys), np.int64, len(keys)) % buckets  # [n] int64
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    bounds = (np.flatnonzero(np.diff(sorted_ids)) + 1).tolist()
    order_list = order.tolist()
    keys = list(map(keys.__getitem__, order_list))
    values = list(map(values.__getitem__, order_list))
    del order, order_list
    with BulkHashWriter(client) as writer:
        for lo, hi in itertools.pairwise([0, *bounds, len(keys)]):
            key = key_of(int(sorted_ids[lo])).encode("utf-8")
            writer.hset(key, keys[lo:hi], values[lo:hi])


def write_lookups(client: redis.Redis, vkeys: VersionKeys, trie: SidTrie) -> dict[str, int]:
    """Write both tables for ``trie``; returns the bucket counts recorded in the manifest."""
    # map() over C-level callables instead of comprehensions: these run once per item.
    sid_format = b",".join([b"%d"] * trie.sids.shape[1]).__mod__  # "c0,c1,..." as sid_key
    sid_text = list(map(sid_format, map(tuple, trie.sids.tolist())))
    offsets = trie.sid_item_offsets.tolist()
    sizes = np.diff(trie.sid_item_offsets)
    item_sid = np.repeat(np.arange(len(sid_text)), sizes).tolist()
    item_values = list(map(sid_text.__getitem__, item_sid))
    del item_sid
    item_keys = list(map(str.encode, trie.item_ids))  # UTF-8
    quoted = list(map(str.encode, map(encode_basestring, trie.item_ids)))
    # SID -> JSON list of its items, in trie order (the order the catalog builder chose).
    sid_values = [b"[" + b",".join(quoted[lo:hi]) + b"]" for lo, hi in itertools.pairwise(offsets)]
    del quoted
    item_buckets = bucket_count(len(item_keys))
    sid_buckets = bucket_count(len(sid_text))
    _write(client, vkeys.items, item_keys, item_values, item_buckets)
    _write(client, vkeys.sids, sid_text, sid_values, sid_buckets)
    return {"item_buckets": item_buckets, "sid_buckets": sid_buckets}


def parse_sid(raw: bytes | None) -> tuple[int, ...] | None:
    return None if raw is None else tuple(int(c) for c in raw.split(b","))


def parse_items(raw: bytes | None) -> list[str]:
    return [] if raw is None else [str(i) for i in json.loads(raw)]


class LookupReader:
    """Point queries against a version's lookup tables, caching its bucket counts."""

    def __init__(self, client: redis.Redis, keys: NamespaceKeys) -> None:
        self.client = client
        self.keys = keys
        # (name, version) -> lookup record; re-validated against the stored one on every query
        # because a version number can be reused after Redis lost its data.
        self._cache: dict[tuple[str, int], dict[str, Any]] = {}

    def get(self, name: str, version: int, kind: str, keys: Sequence[str]) -> list[bytes | None]:
        """Raw HGET values for ``keys`` in the ``kind`` ("item_buckets"/"sid_buckets") table."""
        vkeys = self.keys.catalog(name).version(version)
        cached = self._cache.get((name, version))
        # The lookup record rides along in the same round trip: it proves the version is still
        # complete and that the cached bucket counts belong to this very artifact.
        if cached is not None:
            record_raw, *values = self._fetch(vkeys, kind, keys, cached)
            if record_raw is not None and json.loads(record_raw) == cached:
                return values
        record_raw = self.client.get(vkeys.lookup)
        if record_raw is None:
            self._cache.pop((name, version), None)
            raise VersionNotFoundError(f"catalog {name!r} has no complete version {version}")
        record = json.loads(record_raw)
        if len(self._cache) > 1024:
            self._cache.clear()
        self._cache[(name, version)] = record
        return self._fetch(vkeys, kind, keys, record)[1:]

    def _fetch(
        self, vkeys: VersionKeys, kind: str, keys: Sequence[str], record: dict[str, Any]
    ) -> list[bytes | None]:
        buckets = int(record[kind])
        key_of = vkeys.items if kind == "item_buckets" else vkeys.sids
        pipe = self.client.pipeline(transaction=False)
        pipe.get(vkeys.lookup)
        for k in keys:
            pipe.hget(key_of(bucket_of(k, buckets)), k)
        return pipe.execute()
