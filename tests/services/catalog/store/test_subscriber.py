"""CatalogSubscriber against a real redis-server: follow, swap, reconnect, restart."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.services.catalog.store.conftest import MakeTrie
from tests.support.redis_server import RedisServer, free_port
from widebeam.services.catalog.store import CatalogStore, CatalogSubscriber, LoadedCatalog

# A deadline, not an expected time: each wait returns as soon as its condition holds, and a busy
# machine (a CI runner, the suite's other worker) may need seconds for a reconnect and a load.
WAIT_S = 30.0


def wait_until(pred: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.01)
    return pred()


@pytest.fixture
def subscribe(redis_url: str) -> Iterator[Callable[..., CatalogSubscriber]]:
    subs: list[CatalogSubscriber] = []

    def make(names: list[str] | None = None, **kwargs: object) -> CatalogSubscriber:
        sub = CatalogSubscriber(redis_url, names, poll_block_ms=200, **kwargs)  # type: ignore[arg-type]
        subs.append(sub.start())
        assert sub.wait_ready(5), sub.last_error
        return sub

    yield make
    for sub in subs:
        sub.stop()


def test_initial_load_follow_and_pin(
    store: CatalogStore, make_trie: MakeTrie, subscribe: Callable[..., CatalogSubscriber]
) -> None:
    store.publish("c", make_trie(30, seed=1))
    updates: list[LoadedCatalog] = []
    sub = subscribe(["c"], on_update=updates.append)
    pinned = sub.acquire("c")
    assert pinned.version == 1

    pub = store.publish("c", make_trie(30, seed=2))
    assert sub.wait_for_version("c", 2, timeout=WAIT_S)
    latest = sub.get("c")
    assert latest is not None and latest.content_hash == pub.content_hash
    # The reader that pinned v1 still has an intact v1.
    assert pinned.version == 1 and pinned.content_hash == make_trie(30, seed=1).content_hash
    assert pinned.trie.lookup_sid(pinned.trie.sids[0].tolist())
    assert [u.version for u in updates] == [1, 2]
    assert sub.get("other") is None
    with pytest.raises(LookupError):
        sub.acquire("other")


def test_follow_all_and_rollback(
    store: CatalogStore, make_trie: MakeTrie, subscribe: Callable[..., CatalogSubscriber]
) -> None:
    store.publish("a", make_trie(10, seed=1))
    store.publish("a", make_trie(10, seed=2))
    sub = subscribe(None)
    assert sub.versions() == {"a": 2}
    store.publish("b", make_trie(10, seed=3))  # a catalog that did not exist at start
    assert sub.wait_for_version("b", 1, timeout=WAIT_S)
    store.activate("a", 1)
    assert sub.wait_for_version("a", 1, timeout=WAIT_S)
    assert sub.versions() == {"a": 1, "b": 1}


def test_corrupt_version_keeps_previous(
    store: CatalogStore, make_trie: MakeTrie, subscribe: Callable[..., CatalogSubscriber]
) -> None:
    store.publish("c", make_trie(50, seed=1))
    store.publish("c", make_trie(50, seed=2))
    key = store.keys.catalog("c").version(1).chunk(0)
    store.client.set(key, b"garbage")
    sub = subscribe(["c"])
    store.activate("c", 1)
    assert wait_until(lambda: sub.last_error is not None, WAIT_S)
    assert "checksum mismatch" in str(sub.last_error)
    assert sub.versions() == {"c": 2}


def test_killed_connection_ends_on_newest(
    redis_url: str, store: CatalogStore, make_trie: MakeTrie
) -> None:
    # The subscriber logs in as its own user, so the test can turn that user off: the publishes
    # below then all land while it cannot reconnect, and only its resync after the reconnect
    # can find them (their events are deleted). Without this a busy machine could let it
    # reconnect between the publishes, and the lost event would wait for the periodic resync.
    user, password = "catalog-subscriber-test", "subscriber-secret"
    store.client.execute_command("ACL", "SETUSER", user, "on", f">{password}", "~*", "&*", "+@all")
    url = urlsplit(redis_url)
    sub_url = urlunsplit(url._replace(netloc=f"{user}:{password}@{url.hostname}:{url.port}"))
    store.publish("c", make_trie(20, seed=1))
    # No periodic resync within the test: only the reconnect may find the new versions.
    sub = CatalogSubscriber(sub_url, ["c"], poll_block_ms=200, resync_interval_s=3600).start()
    try:
        assert sub.wait_ready(WAIT_S), sub.last_error
        resyncs = sub.resyncs
        store.client.execute_command("ACL", "SETUSER", user, "off")
        assert store.client.client_kill_filter(user=user) >= 1
        store.publish("c", make_trie(20, seed=2))
        last = store.publish("c", make_trie(20, seed=3))
        store.client.delete(store.keys.events)  # the events are lost; only `current` remains
        assert wait_until(lambda: sub.last_error is not None, WAIT_S)  # a refused reconnect
        assert sub.versions() == {"c": 1}  # keeps serving what it has
        store.client.execute_command("ACL", "SETUSER", user, "on")
        assert sub.wait_for_version("c", 3, timeout=WAIT_S)
        assert sub.acquire("c").artifact_id == last.manifest["artifact_id"]
        assert sub.resyncs > resyncs
    finally:
        sub.stop()
        store.client.execute_command("ACL", "DELUSER", user)


def test_redis_restart_ends_on_newest(
    redis_server: RedisServer,
    store: CatalogStore,
    make_trie: MakeTrie,
    subscribe: Callable[..., CatalogSubscriber],
) -> None:
    store.publish("c", make_trie(20, seed=1))
    store.publish("c", make_trie(20, seed=2))
    # The events are deleted below: a subscriber whose reading of the stream fell between the
    # two publishes learns of the newest at its next resync (a lost event only delays it).
    sub = subscribe(["c"], resync_interval_s=1.0)
    assert sub.versions() == {"c": 2}
    redis_server.restart()  # no persistence: catalog, counter and stream are all gone
    assert wait_until(lambda: sub.last_error is not None, WAIT_S)
    assert sub.versions() == {"c": 2}  # keeps serving what it has while Redis is empty
    # Version numbers restart at 1, so identity must come from artifact_id, not the number.
    store.publish("c", make_trie(20, seed=3))
    last = store.publish("c", make_trie(20, seed=4))
    store.client.delete(store.keys.events)
    newest = last.manifest["artifact_id"]
    assert wait_until(lambda: sub.acquire("c").artifact_id == newest, WAIT_S)
    assert sub.acquire("c").content_hash == last.content_hash


def test_unreachable_redis_does_not_crash() -> None:
    sub = CatalogSubscriber(f"redis://127.0.0.1:{free_port()}/0", ["c"], poll_block_ms=100)
    with sub:
        assert not sub.wait_ready(0.5)
        assert sub.last_error is not None
        assert sub.get("c") is None
    assert sub._thread is not None and not sub._thread.is_alive()


def test_stop_is_prompt(redis_url: str) -> None:
    sub = CatalogSubscriber(redis_url, ["c"], poll_block_ms=200).start()
    assert sub.wait_ready(5)
    t0 = time.monotonic()
    sub.stop()
    # Its thread ended within the stop, well before the join's own time-out (poll + 5 s) would
    # have given up on it.
    assert sub._thread is not None and not sub._thread.is_alive()
    assert time.monotonic() - t0 < 5.0
