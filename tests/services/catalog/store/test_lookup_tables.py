"""The lookup hashes a publish writes hold exactly the item -> SID and SID -> items of the trie,
field for field, as written by the per-field packing they replaced; the bulk writer keeps a batch
in flight and still reports an error without leaving its connection out of step."""

from __future__ import annotations

import json
import random
import zlib

import pytest
import redis

from tests.services.catalog.store.conftest import LAYOUT
from widebeam.services.catalog.store import CatalogStore
from widebeam.services.catalog.store.lookup import bucket_count
from widebeam.services.catalog.store.resp import BulkHashWriter
from widebeam.services.catalog.trie import SidTrie
from widebeam.services.catalog.types import CatalogEntry

ALPHABET = 'ab"\\\n\t é漢😀/,'


def random_trie(seed: int, n_items: int) -> SidTrie:
    rng = random.Random(seed)
    ids: set[str] = set()
    while len(ids) < n_items:
        ids.add("".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 8))))
    pool = [tuple(rng.randrange(16) for _ in range(3)) for _ in range(max(1, n_items // 3))]
    return SidTrie.build([CatalogEntry(i, rng.choice(pool)) for i in sorted(ids)], LAYOUT)


def expected_hashes(trie: SidTrie) -> dict[tuple[str, int], dict[bytes, bytes]]:
    """(table, bucket) -> fields, computed the straightforward way, one item at a time."""
    out: dict[tuple[str, int], dict[bytes, bytes]] = {}
    item_buckets, sid_buckets = bucket_count(trie.num_items), bucket_count(trie.num_sids)
    for row, codes in enumerate(trie.sids.tolist()):
        lo, hi = int(trie.sid_item_offsets[row]), int(trie.sid_item_offsets[row + 1])
        sid = ",".join(str(c) for c in codes).encode()
        items = trie.item_ids[lo:hi]
        for item in items:
            key = item.encode("utf-8")
            out.setdefault(("items", zlib.crc32(key) % item_buckets), {})[key] = sid
        value = json.dumps(items, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        out.setdefault(("sids", zlib.crc32(sid) % sid_buckets), {})[sid] = value
    return out


@pytest.mark.parametrize("seed", range(3))
def test_lookup_hashes_match_the_trie(redis_client: redis.Redis, seed: int) -> None:
    trie = random_trie(seed, n_items=700)
    published = CatalogStore(redis_client, chunk_bytes=512).publish("shop", trie)
    prefix = f"widebeam:cat:shop:v:{published.version}"
    written = {
        (table, int(key.rsplit(b":", 1)[1])): redis_client.hgetall(key)
        for table in ("items", "sids")
        for key in redis_client.scan_iter(f"{prefix}:{table}:*".encode())
    }
    assert written == expected_hashes(trie)


def test_bulk_writer_batches_in_flight(redis_client: redis.Redis) -> None:
    fields = [f"f{i}".encode() for i in range(40)]
    with BulkHashWriter(redis_client, flush_bytes=64) as writer:  # a flush every command or two
        for k in range(50):
            writer.hset(f"bulk:{k}".encode(), fields, [f"{k}-{i}".encode() for i in range(40)])
    for k in range(50):
        assert redis_client.hgetall(f"bulk:{k}") == {f: f"{k}-{i}".encode() for i, f in
                                                    enumerate(fields)}  # fmt: skip


def test_bulk_writer_error_keeps_the_client_usable(redis_client: redis.Redis) -> None:
    redis_client.set("plain", b"x")
    failing = pytest.raises(redis.ResponseError, match="WRONGTYPE")
    with failing, BulkHashWriter(redis_client, flush_bytes=16) as writer:
        writer.hset(b"ok:1", [b"a"], [b"1"])
        writer.hset(b"plain", [b"a"], [b"1"])  # a string key: HSET fails
        for k in range(20):
            writer.hset(f"ok:{k + 2}".encode(), [b"a"], [b"1"])
    assert redis_client.ping() and redis_client.get("plain") == b"x"
    mismatched = pytest.raises(ValueError, match="2 fields but 1 values")
    with mismatched, BulkHashWriter(redis_client) as writer:
        writer.hset(b"k", [b"a", b"b"], [b"1"])
