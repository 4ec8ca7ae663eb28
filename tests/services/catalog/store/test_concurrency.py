"""Concurrent publishers: `current` must always name a complete, loadable version."""

from __future__ import annotations

import threading

import redis

from tests.services.catalog.store.conftest import MakeTrie
from widebeam.services.catalog.store import CatalogStore

PUBLISHERS = 4
PER_PUBLISHER = 5


def test_current_always_loadable_under_concurrent_publishes(
    redis_url: str, make_trie: MakeTrie
) -> None:
    tries = {
        (p, i): make_trie(80, seed=100 * p + i)
        for p in range(PUBLISHERS)
        for i in range(PER_PUBLISHER)
    }
    hashes = {t.content_hash for t in tries.values()}
    done = threading.Event()
    errors: list[BaseException] = []
    loads: list[int] = []

    def reader() -> None:
        # retain is large so the version read as current cannot be retired before we load it.
        store = CatalogStore(redis.Redis.from_url(redis_url), retain=100)
        try:
            while not done.is_set():
                version = store.current_version("c")
                if version is None:
                    continue
                loaded = store.load("c", version)  # raises on a missing/partial artifact
                assert loaded.content_hash in hashes
                first = loaded.trie.item_ids[0]
                assert store.item_sid("c", version, first) is not None
                loads.append(version)
        except BaseException as exc:
            errors.append(exc)

    def publisher(p: int) -> None:
        store = CatalogStore(redis.Redis.from_url(redis_url), retain=100, chunk_bytes=256)
        try:
            for i in range(PER_PUBLISHER):
                store.publish("c", tries[(p, i)], metadata={"publisher": p, "i": i})
        except BaseException as exc:
            errors.append(exc)

    readers = [threading.Thread(target=reader) for _ in range(2)]
    writers = [threading.Thread(target=publisher, args=(p,)) for p in range(PUBLISHERS)]
    for t in readers + writers:
        t.start()
    for t in writers:
        t.join(timeout=60)
    done.set()
    for t in readers:
        t.join(timeout=10)
    assert not errors, errors
    assert loads, "the readers never saw a current version"

    store = CatalogStore(redis.Redis.from_url(redis_url), retain=100)
    total = PUBLISHERS * PER_PUBLISHER
    assert store.list_versions("c") == list(range(1, total + 1))
    assert store.current_version("c") == total  # the newest published version wins races
    assert {store.load("c", v).content_hash for v in range(1, total + 1)} == hashes
