"""CatalogStore against a real redis-server: round trip, integrity, rollback, retention."""

from __future__ import annotations

import json

import numpy as np
import pytest
import redis

from tests.services.catalog.store.conftest import MakeTrie
from widebeam.services.catalog.store import (
    ArtifactError,
    CatalogStore,
    InvalidNameError,
    VersionNotFoundError,
)
from widebeam.services.catalog.trie import SidTrie


def test_publish_load_round_trip(store: CatalogStore, make_trie: MakeTrie) -> None:
    trie = make_trie(200, seed=1)
    meta = {"source_format": "jsonl", "item_count": trie.num_items}
    pub = store.publish("books", trie, metadata=meta)
    assert (pub.version, pub.activated, pub.content_hash) == (1, True, trie.content_hash)
    assert store.current_version("books") == 1
    assert store.list_catalogs() == ["books"]
    assert store.list_versions("books") == [1]

    loaded = store.load("books")
    assert (loaded.name, loaded.version) == ("books", 1)
    assert loaded.trie.content_hash == trie.content_hash
    want, got = trie.to_arrays(), loaded.trie.to_arrays()
    assert want.keys() == got.keys()
    for key in want:
        np.testing.assert_array_equal(got[key], want[key])

    manifest = store.manifest("books", 1)
    assert manifest == loaded.manifest == pub.manifest
    assert manifest["metadata"] == meta
    assert manifest["layout"] == trie.layout.to_dict()
    assert manifest["stats"] == trie.stats()
    assert manifest["artifact"]["chunk_count"] > 1  # the fixture uses 512-byte chunks
    assert all(s <= 512 for s in manifest["artifact"]["chunk_sizes"])


def test_versions_increase_and_newest_is_current(store: CatalogStore, make_trie: MakeTrie) -> None:
    for seed in range(3):
        store.publish("c", make_trie(20, seed=seed))
    assert store.list_versions("c") == [1, 2, 3]
    assert store.load("c").trie.content_hash == make_trie(20, seed=2).content_hash


def _chunk_key(store: CatalogStore, name: str, version: int, index: int) -> str:
    return store.keys.catalog(name).version(version).chunk(index)


def test_corrupt_chunk_detected(store: CatalogStore, make_trie: MakeTrie) -> None:
    store.publish("c", make_trie(100))
    key = _chunk_key(store, "c", 1, 1)
    raw = store.client.get(key)
    store.client.set(key, bytes([raw[0] ^ 0xFF]) + raw[1:])
    with pytest.raises(ArtifactError, match=r"version 1: chunk 1/\d+ checksum mismatch"):
        store.load("c", 1)


def test_missing_chunk_detected(store: CatalogStore, make_trie: MakeTrie) -> None:
    store.publish("c", make_trie(100))
    store.client.delete(_chunk_key(store, "c", 1, 0))
    with pytest.raises(ArtifactError, match=r"chunk 0/\d+ is missing"):
        store.load("c")


def test_unknown_names_and_versions(store: CatalogStore, make_trie: MakeTrie) -> None:
    assert store.current_version("nope") is None
    assert store.list_versions("nope") == []
    with pytest.raises(VersionNotFoundError, match="no current version"):
        store.load("nope")
    store.publish("c", make_trie(10))
    with pytest.raises(VersionNotFoundError, match="no complete version 7"):
        store.manifest("c", 7)
    with pytest.raises(VersionNotFoundError):
        store.item_sid("c", 7, "x")


@pytest.mark.parametrize(
    "bad", ["", "a" * 65, "has space", "a:b", "*", "ü", ".", "..", ".hidden", "-x", "_x", "a/b"]
)
def test_name_validation(store: CatalogStore, make_trie: MakeTrie, bad: str) -> None:
    with pytest.raises(InvalidNameError, match="invalid catalog name"):
        store.publish(bad, make_trie(5))
    with pytest.raises(InvalidNameError):
        store.current_version(bad)


def test_bad_metadata_writes_nothing(store: CatalogStore, make_trie: MakeTrie) -> None:
    with pytest.raises(ValueError, match="not JSON-serialisable"):
        store.publish("c", make_trie(5), metadata={"x": object()})
    assert store.client.keys("*") == []


def test_decode_responses_client_rejected(redis_url: str) -> None:
    with pytest.raises(ValueError, match="decode_responses=False"):
        CatalogStore(redis.Redis.from_url(redis_url, decode_responses=True))


def test_activate_rollback_and_events(store: CatalogStore, make_trie: MakeTrie) -> None:
    tries = [make_trie(30, seed=s) for s in range(3)]
    for t in tries:
        store.publish("c", t)
    store.activate("c", 1)
    assert store.current_version("c") == 1
    assert store.load("c").trie.content_hash == tries[0].content_hash
    store.activate("c", 3)  # roll forward again
    assert store.current_version("c") == 3
    with pytest.raises(VersionNotFoundError):
        store.activate("c", 9)
    assert store.current_version("c") == 3
    events = store.client.xrange(store.keys.events)
    got = [(f[b"name"], f[b"version"], f[b"action"]) for _, f in events]
    assert got == [(b"c", str(v).encode(), b"publish") for v in (1, 2, 3)] + [
        (b"c", b"1", b"activate"),
        (b"c", b"3", b"activate"),
    ]


def test_retention_keeps_last_n(redis_client: redis.Redis, make_trie: MakeTrie) -> None:
    store = CatalogStore(redis_client, retain=2, chunk_bytes=512)
    for seed in range(6):
        store.publish("c", make_trie(40, seed=seed))
    assert store.current_version("c") == 6
    assert store.list_versions("c") == [5, 6]
    for gone in (1, 2, 3, 4):
        assert redis_client.keys(f"widebeam:cat:c:v:{gone}:*") == []
        with pytest.raises(VersionNotFoundError):
            store.load("c", gone)
    assert store.load("c", 5).version == 5


def test_retention_never_deletes_current(redis_client: redis.Redis, make_trie: MakeTrie) -> None:
    for seed in range(3):
        CatalogStore(redis_client, retain=3).publish("c", make_trie(20, seed=seed))
    store = CatalogStore(redis_client, retain=1)
    store.activate("c", 1)  # rolled back to the oldest version
    assert store.prune("c") == [2]
    assert store.list_versions("c") == [1, 3]
    assert store.current_version("c") == 1
    assert store.load("c").version == 1
    assert redis_client.keys("widebeam:cat:c:v:2:*") == []


def test_uncommitted_version_is_invisible_and_collected(
    store: CatalogStore, make_trie: MakeTrie, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.publish("c", make_trie(20, seed=0))

    def crash(*args: object, **kwargs: object) -> None:
        raise RuntimeError("publisher died before committing")

    # A publisher that wrote everything but the manifest: simulate by failing the commit
    # after leaving its staged keys behind (cleanup skipped too, as in a killed process).
    monkeypatch.setattr(store, "_commit", crash)
    monkeypatch.setattr(store, "_discard", lambda *a: None)
    with pytest.raises(RuntimeError, match="died"):
        store.publish("c", make_trie(20, seed=1))
    monkeypatch.undo()
    assert store.current_version("c") == 1
    assert store.list_versions("c") == [1]
    with pytest.raises(VersionNotFoundError):
        store.load("c", 2)
    assert store.client.keys("widebeam:cat:c:v:2:*")  # staged data exists, yet is invisible
    store.staging_ttl_s = 0.0
    store.prune("c")
    assert store.client.keys("widebeam:cat:c:v:2:*") == []
    assert store.load("c").version == 1


def test_version_numbers_never_reuse_a_committed_one(
    store: CatalogStore, make_trie: MakeTrie
) -> None:
    """The counter lost (an evicted or deleted key) while versions remain: the next publish
    numbers above them instead of overwriting version 1's chunks."""
    store.publish("c", make_trie(20, seed=0))
    store.publish("c", make_trie(20, seed=1))
    store.client.delete(store.keys.catalog("c").seq)
    pub = store.publish("c", make_trie(20, seed=2))
    assert (pub.version, pub.activated) == (3, True)
    assert [store.load("c", v).trie.content_hash for v in (1, 2, 3)] == [
        make_trie(20, seed=s).content_hash for s in range(3)
    ]


def test_item_and_sid_lookups(store: CatalogStore, make_trie: MakeTrie) -> None:
    trie = make_trie(300, seed=4)
    store.publish("c", trie)
    store.publish("c", make_trie(10, seed=5, prefix="other"))
    manifest = store.manifest("c", 1)
    assert manifest["lookup"]["item_buckets"] > 1
    for s, codes in enumerate(trie.sids.tolist()):
        lo, hi = trie.sid_item_offsets[s], trie.sid_item_offsets[s + 1]
        items = trie.item_ids[lo:hi]
        assert store.sid_items("c", 1, codes) == items
        assert store.sid_items("c", 1, ",".join(map(str, codes))) == items
        for item in items:
            assert store.item_sid("c", 1, item) == tuple(codes)
    sample = trie.item_ids[:5]
    assert store.item_sids("c", 1, [*sample, "missing"]) == [
        *(store.item_sid("c", 1, i) for i in sample),
        None,
    ]
    # version None = current (v2, which does not hold v1's items)
    assert store.item_sid("c", None, trie.item_ids[0]) is None
    assert store.sid_items("c", 1, [99, 0, 0]) == []
    assert store.sid_items("c", 1, "x,y") == []


def test_lookup_cache_survives_data_loss(store: CatalogStore, make_trie: MakeTrie) -> None:
    big, small = make_trie(300, seed=1), make_trie(5, seed=2, prefix="s")
    store.publish("c", big)
    assert store.item_sid("c", 1, big.item_ids[0]) is not None
    store.client.flushall()  # Redis lost everything; version 1 gets reused by a new publish
    store.publish("c", small)
    assert store.item_sid("c", 1, big.item_ids[0]) is None
    sid = store.item_sid("c", 1, small.item_ids[0])
    assert sid is not None and small.item_ids[0] in store.sid_items("c", 1, sid)


def test_manifest_is_plain_json(store: CatalogStore, make_trie: MakeTrie) -> None:
    store.publish("c", make_trie(10))
    raw = store.client.get(store.keys.catalog("c").version(1).manifest)
    assert json.loads(raw)["schema"] == "widebeam.catalog.manifest/1"
    trie = SidTrie.from_arrays(make_trie(10).to_arrays())
    assert store.load("c").trie.content_hash == trie.content_hash


def test_publish_without_activate_keeps_current(store: CatalogStore, make_trie: MakeTrie) -> None:
    first = store.publish("books", make_trie(20, seed=0))
    staged = store.publish("books", make_trie(20, seed=1), activate=False)
    assert first.activated and not staged.activated
    assert store.current_version("books") == first.version
    assert store.list_versions("books") == [first.version, staged.version]
    store.activate("books", staged.version)
    assert store.current_version("books") == staged.version
