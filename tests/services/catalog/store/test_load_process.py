"""A version loaded in a child process (load_process.py) is the version CatalogStore.load gives,
mapped into this process; the child's errors come back as the store's own."""

from __future__ import annotations

import json
import logging
import os

import numpy as np
import pytest
import redis

from tests.services.catalog.store.conftest import MakeTrie
from tests.services.catalog.store.legacy_artifact import rewrite_as_old
from tests.support.redis_server import free_port
from widebeam.services.catalog.store import ArtifactError, CatalogStore, VersionNotFoundError
from widebeam.services.catalog.store.load_process import idle_budget, load_in_child
from widebeam.services.catalog.trie import SidTrie
from widebeam.services.decoder.constraint.trie_arrays import constraint_arrays


def child_load(store: CatalogStore, url: str, name: str, version: int):
    raw_bytes = int(store.manifest(name, version)["artifact"]["raw_bytes"])
    return load_in_child(url, store.namespace, name, version, raw_bytes)


def test_same_version_as_an_in_process_load(
    store: CatalogStore, redis_url: str, make_trie: MakeTrie
) -> None:
    store.publish("books", make_trie(300, seed=1), metadata={"source": "test"})
    store.publish("books", make_trie(200, seed=2, prefix="é\n漢"))
    for version in (1, 2):
        here, there = store.load("books", version), child_load(store, redis_url, "books", version)
        assert (there.name, there.version, there.manifest) == ("books", version, here.manifest)
        assert there.trie.content_hash == here.trie.content_hash == here.content_hash
        want, got = here.trie.to_arrays(), there.trie.to_arrays()
        assert want.keys() == got.keys()
        for key in want:
            np.testing.assert_array_equal(got[key], want[key])
        assert list(there.trie.item_ids) == list(here.trie.item_ids)
        # the child's hash index (its own process, same hash) is the one computed here
        np.testing.assert_array_equal(there.trie.item_ids.hash_index, here.trie.item_ids.hash_index)
        assert not there.trie.child_offsets.flags.writeable  # a mapped version is immutable
        # views of the payload the child decoded into shared memory, not copies of it
        trie = there.trie
        big = (trie.child_offsets, trie.child_tokens, trie.child_nodes, trie.leaf_sid, trie.sids,
               trie.sid_item_offsets, trie.item_ids.blob, trie.item_ids.offsets)  # fmt: skip
        assert not any(a.flags.owndata for a in big)


def test_versions_published_before_pieces_and_alignment_still_load(
    store: CatalogStore, redis_url: str, make_trie: MakeTrie
) -> None:
    store.publish("old", make_trie(300, seed=3))
    want = store.load("old", 1)
    rewrite_as_old(store, "old", 1, chunk_bytes=256)
    assert store.manifest("old", 1)["artifact"]["encoding"] == "wbarrays/1"
    for loaded in (store.load("old", 1), child_load(store, redis_url, "old", 1)):
        assert loaded.trie.content_hash == want.trie.content_hash
        for key, array in want.trie.to_arrays().items():
            np.testing.assert_array_equal(loaded.trie.to_arrays()[key], array)
        assert list(loaded.trie.item_ids) == list(want.trie.item_ids)


def test_errors_are_the_stores(store: CatalogStore, redis_url: str, make_trie: MakeTrie) -> None:
    store.publish("c", make_trie(100))
    key = store.keys.catalog("c").version(1).chunk(1)
    raw = store.client.get(key)
    store.client.set(key, bytes([raw[0] ^ 0xFF]) + raw[1:])
    with pytest.raises(ArtifactError, match=r"version 1: chunk 1/\d+ checksum mismatch"):
        child_load(store, redis_url, "c", 1)
    with pytest.raises(VersionNotFoundError, match="no complete version 7"):
        load_in_child(redis_url, store.namespace, "c", 7, 1000)
    nobody = f"redis://127.0.0.1:{free_port()}/0"
    with pytest.raises(redis.ConnectionError):
        load_in_child(nobody, store.namespace, "c", 1, 1000)


def test_a_password_protected_redis(
    store: CatalogStore, redis_url: str, make_trie: MakeTrie
) -> None:
    # The URL with its password reaches the child on stdin (never in its argv).
    store.publish("locked", make_trie(50))
    raw_bytes = int(store.manifest("locked", 1)["artifact"]["raw_bytes"])
    assert redis_url.startswith("redis://") and "@" not in redis_url

    def with_password(password: str) -> str:
        return redis_url.replace("redis://", f"redis://:{password}@", 1)

    store.client.config_set("requirepass", "s3cret-pass")  # this connection stays signed in
    try:
        good = with_password("s3cret-pass")
        loaded = load_in_child(good, store.namespace, "locked", 1, raw_bytes)
        assert loaded.trie.num_items == 50
        with pytest.raises(redis.ConnectionError, match=r"(?i)invalid|auth|WRONGPASS"):
            load_in_child(with_password("wrong"), store.namespace, "locked", 1, raw_bytes)
    finally:
        store.client.config_set("requirepass", "")


def test_the_child_derives_what_the_caller_asks(
    store: CatalogStore, redis_url: str, make_trie: MakeTrie
) -> None:
    """The decoder's trie arrays come back mapped, equal to what this process derives (its
    scalars as 0-d arrays)."""
    store.publish("books", make_trie(300, seed=3))
    raw_bytes = int(store.manifest("books", 1)["artifact"]["raw_bytes"])
    there = load_in_child(
        redis_url, store.namespace, "books", 1, raw_bytes, derive=constraint_arrays
    )
    want = constraint_arrays(there.trie)
    assert there.derived.keys() == want.keys()
    for key, array in want.items():
        assert (there.derived[key].dtype, there.derived[key].shape) == (array.dtype, array.shape)
        np.testing.assert_array_equal(there.derived[key], array)
    assert store.load("books", 1).derived == {}  # in process: nothing derived unasked


def test_derive_must_be_importable_by_name(
    store: CatalogStore, redis_url: str, make_trie: MakeTrie
) -> None:
    store.publish("books", make_trie(30))

    def local(trie: SidTrie) -> dict[str, np.ndarray]:
        return {}

    for derive in (local, lambda trie: {}):
        with pytest.raises(ValueError, match="module-level function"):
            load_in_child(redis_url, store.namespace, "books", 1, 10_000, derive=derive)


def test_a_content_hash_that_differs_is_refused_in_the_child_and_here(
    store: CatalogStore, redis_url: str, make_trie: MakeTrie
) -> None:
    """Checksums that hold over a payload whose trie is not the manifest's (a publisher's
    bug): the child checks the content hash beside its other work, and still refuses."""
    store.publish("books", make_trie(120, seed=4))
    key = store.keys.catalog("books").version(1).manifest
    manifest = json.loads(store.client.get(key))
    manifest["content_hash"] = "0" * 64
    store.client.set(key, json.dumps(manifest))
    with pytest.raises(ArtifactError, match="content hash differs from the manifest"):
        store.load("books", 1)
    with pytest.raises(ArtifactError, match="content hash differs from the manifest"):
        child_load(store, redis_url, "books", 1)
    assert store.load("books", 1, verify_content=False).trie.num_items == 120


def scheduling_policy(trie: SidTrie) -> dict[str, np.ndarray]:
    """A derive that reports the scheduling policy of the child's thread running it."""
    return {"policy": np.asarray(os.sched_getscheduler(0), dtype=np.int64)}


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="Linux scheduling classes")
def test_idle_first_then_at_its_niceness_when_idle_cpu_does_not_come(
    store: CatalogStore, redis_url: str, make_trie: MakeTrie, caplog: pytest.LogCaptureFixture
) -> None:
    """A load runs in the idle class (its threads too); one that does not finish within its
    idle budget (here none: no child starts in a millisecond) is loaded again at its niceness,
    with a warning, and gives the same version."""
    store.publish("books", make_trie(200, seed=5))
    raw_bytes = int(store.manifest("books", 1)["artifact"]["raw_bytes"])
    want = store.load("books", 1).trie.content_hash
    logger = "widebeam.services.catalog.store"

    def load(idle_budget_s: float | None) -> tuple[int, str]:
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger=logger):
            loaded = load_in_child(
                redis_url,
                store.namespace,
                "books",
                1,
                raw_bytes,
                derive=scheduling_policy,
                idle_budget_s=idle_budget_s,
            )
        assert loaded.trie.content_hash == want
        return int(loaded.derived["policy"]), caplog.text  # fmt: skip

    # the budget for this size: in the idle class, unless this machine had no idle CPU for it
    policy, warned = load(None)
    assert (policy, "no idle CPU" in warned) in ((os.SCHED_IDLE, False), (os.SCHED_OTHER, True))
    policy, warned = load(0.001)
    assert policy == os.SCHED_OTHER
    assert "no idle CPU for 0 s; loading it at niceness 10" in warned
    policy, warned = load(0)  # no idle attempt at all
    assert policy == os.SCHED_OTHER and "no idle CPU" not in warned


def test_idle_budget_grows_with_the_artifact() -> None:
    assert idle_budget(1_000) == 2.0  # small catalogs: the floor
    assert 40 < idle_budget(865_000_000) < 50  # 10M items
