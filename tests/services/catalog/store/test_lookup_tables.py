"""The lookup tables a publish writes hold exactly the item -> SID and SID -> items of the trie
(decoded bucket by bucket and compared with the trie one item at a time); the numpy hashes agree
with the one-key hashes readers use; versions in the older HASH layout stay readable and an
unknown layout is refused by name; the bulk writer keeps a batch in flight and still reports
an error without leaving its connection out of step."""

from __future__ import annotations

import json
import random
import zlib

import numpy as np
import pytest
import redis

from tests.services.catalog.store.conftest import LAYOUT
from widebeam.services.catalog.formats import load_trie
from widebeam.services.catalog.store import ArtifactError, CatalogStore
from widebeam.services.catalog.store import lookup_layout as packed
from widebeam.services.catalog.store.resp import BulkWriter
from widebeam.services.catalog.trie import SidTrie
from widebeam.services.catalog.types import CatalogEntry

ALPHABET = 'ab"\\\n\t é漢😀/,'


def random_trie(seed: int, n_items: int, max_len: int = 8) -> SidTrie:
    rng = random.Random(seed)
    ids: set[str] = set()
    while len(ids) < n_items:
        ids.add("".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, max_len))))
    pool = [tuple(rng.randrange(16) for _ in range(3)) for _ in range(max(1, n_items // 3))]
    return SidTrie.build([CatalogEntry(i, rng.choice(pool)) for i in sorted(ids)], LAYOUT)


def trie_tables(trie: SidTrie) -> tuple[dict[str, tuple[int, ...]], dict[tuple[int, ...], list]]:
    by_item: dict[str, tuple[int, ...]] = {}
    by_sid: dict[tuple[int, ...], list[str]] = {}
    for row, codes in enumerate(trie.sids.tolist()):
        lo, hi = int(trie.sid_item_offsets[row]), int(trie.sid_item_offsets[row + 1])
        items = [trie.item_ids[i] for i in range(lo, hi)]
        by_sid[tuple(codes)] = items
        for item in items:
            by_item[item] = tuple(codes)
    return by_item, by_sid


def stored_tables(client: redis.Redis, prefix: str, record: dict) -> tuple[dict, dict]:
    """Every bucket decoded; also checks each record sits in the bucket its hash names."""
    n, per, depth = record["num_items"], record["names_per_bucket"], record["depth"]
    names: dict[int, str] = {}
    for key in client.scan_iter(f"{prefix}:nb:*".encode()):
        k = int(key.rsplit(b":", 1)[1])
        for i, raw in enumerate(packed.parse_names(client.get(key), min(per, n - k * per))):
            names[k * per + i] = raw.decode()
    assert sorted(names) == list(range(n))
    by_item: dict[str, tuple[int, ...]] = {}
    for key in client.scan_iter(f"{prefix}:ib:*".encode()):
        b = int(key.rsplit(b":", 1)[1])
        for row in packed.parse_records(client.get(key), 2 + depth).tolist():
            item = names[row[1]]
            h = packed.item_hash(item.encode())
            assert packed.bucket_of_hash(h, record["item_buckets"].bit_length() - 1) == b
            assert row[0] == h >> 32
            by_item[item] = tuple(np.array(row[2:], dtype=np.uint32).view(np.int32).tolist())
    by_sid: dict[tuple[int, ...], list[str]] = {}
    for key in client.scan_iter(f"{prefix}:sb:*".encode()):
        b = int(key.rsplit(b":", 1)[1])
        for row in packed.parse_records(client.get(key), 3 + depth).tolist():
            codes = tuple(np.array(row[3:], dtype=np.uint32).view(np.int32).tolist())
            h = packed.sid_hash(codes)
            assert packed.bucket_of_hash(h, record["sid_buckets"].bit_length() - 1) == b
            assert row[0] == h >> 32
            by_sid[codes] = [names[p] for p in range(row[1], row[1] + row[2])]
    return by_item, by_sid


@pytest.mark.parametrize("seed", range(3))
def test_lookup_tables_match_the_trie(redis_client: redis.Redis, seed: int) -> None:
    trie = random_trie(seed, n_items=700)
    store = CatalogStore(redis_client, chunk_bytes=512)
    published = store.publish("shop", trie)
    record = published.manifest["lookup"]
    assert record["layout"] == "packed/1" and record["item_buckets"] >= 8
    prefix = f"widebeam:cat:shop:v:{published.version}"
    assert stored_tables(redis_client, prefix, record) == trie_tables(trie)
    by_item, by_sid = trie_tables(trie)
    ids = list(by_item)
    assert store.item_sids("shop", None, [*ids, "absent", ids[0] + "x"]) == [
        *by_item.values(), None, None]  # fmt: skip
    for codes, items in by_sid.items():
        assert store.sid_items("shop", None, list(codes)) == items


def test_packing_in_many_chunks_and_long_ids(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chunk boundaries of the hashing passes (tiny here) change nothing; an id longer than a
    hashing chunk gets a chunk of its own."""
    monkeypatch.setattr(packed, "_HASH_CHUNK_BYTES", 16)
    rng = random.Random(5)
    entries = [CatalogEntry(f"i{k}" * rng.randint(1, 30), (k % 5, k % 3, k % 7)) for k in
               range(400)]  # fmt: skip
    entries.append(CatalogEntry("L" * 5000, (1, 1, 1)))
    trie = SidTrie.build(entries, LAYOUT)
    published = CatalogStore(redis_client).publish("long", trie)
    prefix = f"widebeam:cat:long:v:{published.version}"
    assert stored_tables(redis_client, prefix, published.manifest["lookup"]) == trie_tables(trie)


def test_numpy_hashes_agree_with_one_key_hashes() -> None:
    rng = random.Random(1)
    strings = ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 40))) for _ in
               range(300)]  # fmt: skip
    encoded = [s.encode() for s in strings]
    offsets = np.concatenate(([0], np.cumsum([len(e) for e in encoded]))).astype(np.int64)
    blob = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    want = [packed.item_hash(e) for e in encoded]
    assert packed.item_hashes(blob, offsets).tolist() == want
    codes = np.array([[rng.randrange(2**31) for _ in range(4)] for _ in range(300)])
    assert packed.sid_hashes(codes).tolist() == [packed.sid_hash(c) for c in codes.tolist()]
    # different strings and SIDs spread over buckets, not onto a few
    assert len({h % 64 for h in want}) > 50


def write_hash_layout_version(client: redis.Redis, store: CatalogStore, trie: SidTrie) -> int:
    """A version as publishes before the packed layout left it: lookup HASHes, crc32 buckets
    and a lookup record without a layout."""
    published = store.publish("old", trie)
    prefix = f"widebeam:cat:old:v:{published.version}"
    for table in ("nb", "ib", "sb"):
        for key in client.scan_iter(f"{prefix}:{table}:*"):
            client.delete(key)
    by_item, by_sid = trie_tables(trie)
    for item, codes in by_item.items():
        sid = ",".join(map(str, codes)).encode()
        client.hset(f"{prefix}:items:{zlib.crc32(item.encode()) % 3}", item.encode(), sid)
    for codes, items in by_sid.items():
        sid = ",".join(map(str, codes)).encode()
        value = json.dumps(items, ensure_ascii=False).encode()
        client.hset(f"{prefix}:sids:{zlib.crc32(sid) % 2}", sid, value)
    record = json.loads(client.get(f"{prefix}:lookup"))
    old = {"artifact_id": record["artifact_id"], "item_buckets": 3, "sid_buckets": 2}
    client.set(f"{prefix}:lookup", json.dumps(old))
    return published.version


def test_hash_layout_versions_stay_readable(redis_client: redis.Redis) -> None:
    trie = random_trie(7, n_items=60)
    store = CatalogStore(redis_client)
    version = write_hash_layout_version(redis_client, store, trie)
    by_item, by_sid = trie_tables(trie)
    reader = CatalogStore(redis_client)  # a fresh process: no cached lookup record
    assert reader.item_sids("old", version, [*by_item, "absent"]) == [*by_item.values(), None]
    for codes, items in by_sid.items():
        assert reader.sid_items("old", version, ",".join(map(str, codes))) == items
    assert reader.sid_items("old", version, [15, 15, 15]) == trie.lookup_sid([15, 15, 15])


def test_unknown_layout_and_malformed_buckets_are_named(redis_client: redis.Redis) -> None:
    trie = random_trie(8, n_items=40)
    store = CatalogStore(redis_client)
    v = store.publish("odd", trie).version
    prefix = f"widebeam:cat:odd:v:{v}"
    item = trie.item_ids[0]
    everything = [trie.item_ids[i] for i in range(40)]
    for table in ("ib", "nb"):
        bucket_key = next(iter(redis_client.scan_iter(f"{prefix}:{table}:*")))
        good = redis_client.get(bucket_key)
        redis_client.set(bucket_key, b"\x05\x00")
        with pytest.raises(ArtifactError, match=f"catalog 'odd' version {v}: lookup bucket is"):
            CatalogStore(redis_client).item_sids("odd", v, everything)
        redis_client.set(bucket_key, good)
    names_key = next(iter(redis_client.scan_iter(f"{prefix}:nb:*")))
    redis_client.delete(names_key)
    with pytest.raises(ArtifactError, match=r"lookup names bucket \d+ is missing"):
        CatalogStore(redis_client).item_sids("odd", v, everything)
    record = json.loads(redis_client.get(f"{prefix}:lookup"))
    redis_client.set(f"{prefix}:lookup", json.dumps({**record, "layout": "packed/9"}))
    with pytest.raises(ArtifactError, match="lookup layout 'packed/9' is not one this widebeam"):
        CatalogStore(redis_client).item_sid("odd", v, item)


def test_bulk_writer_batches_in_flight(redis_client: redis.Redis) -> None:
    fields = [f"f{i}".encode() for i in range(40)]
    with BulkWriter(redis_client, flush_bytes=64) as writer:  # a flush every command or two
        for k in range(50):
            writer.hset(f"bulk:{k}".encode(), fields, [f"{k}-{i}".encode() for i in range(40)])
            writer.set(f"str:{k}".encode(), (b"a" * k, memoryview(np.arange(k, dtype=np.uint8))))
    for k in range(50):
        assert redis_client.hgetall(f"bulk:{k}") == {f: f"{k}-{i}".encode() for i, f in
                                                    enumerate(fields)}  # fmt: skip
        assert redis_client.get(f"str:{k}") == b"a" * k + bytes(range(k))


def test_bulk_writer_error_keeps_the_client_usable(redis_client: redis.Redis) -> None:
    redis_client.set("plain", b"x")
    failing = pytest.raises(redis.ResponseError, match="WRONGTYPE")
    with failing, BulkWriter(redis_client, flush_bytes=16) as writer:
        writer.hset(b"ok:1", [b"a"], [b"1"])
        writer.hset(b"plain", [b"a"], [b"1"])  # a string key: HSET fails
        for k in range(20):
            writer.hset(f"ok:{k + 2}".encode(), [b"a"], [b"1"])
    assert redis_client.ping() and redis_client.get("plain") == b"x"
    mismatched = pytest.raises(ValueError, match="2 fields but 1 values")
    with mismatched, BulkWriter(redis_client) as writer:
        writer.hset(b"k", [b"a", b"b"], [b"1"])


def test_catalog_file_through_publish_and_lookups(redis_client: redis.Redis) -> None:
    """A JSONL file with ids of every kind of character, a duplicated row, an id far longer
    than the rest and one SID shared by more items than a names bucket holds: what the lookups
    answer after publish is what the trie built from the file says."""
    rows = [{"item_id": f"shared-{k}", "sid": [3, 3, 3], "popularity": k % 7} for k in range(300)]
    rng = random.Random(9)
    for k in range(500):
        item = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 6))) + f"#{k}"
        rows.append({"item_id": item, "sid": [rng.randrange(16) for _ in range(3)]})
    rows.append({"item_id": "x" * 20000, "sid": [1, 2, 3]})
    rows.append(rows[7])  # the same item and SID again: dropped, first row kept
    data = "\n".join(json.dumps(r, ensure_ascii=rng.random() < 0.5) for r in rows).encode()
    trie, fmt = load_trie(data + b"\n", LAYOUT)
    assert fmt == "jsonl" and trie.num_items == 801
    store = CatalogStore(redis_client)
    store.publish("file", trie)
    by_item, by_sid = trie_tables(trie)
    assert store.item_sids("file", None, list(by_item)) == list(by_item.values())
    shared = store.sid_items("file", None, [3, 3, 3])
    assert shared == by_sid[(3, 3, 3)] and len(shared) >= 300
    assert shared[:2] == ["shared-6", "shared-13"]  # popularity 6 first, then input order
    assert store.item_sid("file", None, "x" * 20000) == (1, 2, 3)
    assert store.item_sid("file", None, "x" * 19999) is None
