"""A Redis that may evict keys is refused before a publish writes anything (a real
redis-server configured with each kind of evicting policy)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.services.catalog.store.conftest import MakeTrie
from tests.support.redis_server import RedisServer, find_redis_server
from widebeam.services.catalog.store import CatalogStore, EvictingRedisError, require_no_eviction
from widebeam.services.catalog.store.eviction import eviction_policy

pytestmark = pytest.mark.skipif(find_redis_server() is None, reason="needs redis-server")


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[redis.Redis]:
    """A redis-server of this test's own: its policy is changed, which the shared one's
    other users must not see."""
    with RedisServer(tmp_path / "redis") as server, redis.Redis.from_url(server.url) as client:
        yield client


@pytest.mark.parametrize("policy", ["allkeys-lru", "allkeys-lfu", "allkeys-random", "volatile-lru",
                                    "volatile-ttl"])  # fmt: skip
def test_publish_refuses_an_evicting_redis_and_writes_nothing(
    own_redis: redis.Redis, make_trie: MakeTrie, policy: str
) -> None:
    store = CatalogStore(own_redis)
    store.publish("other", make_trie(20, seed=1))
    keys_before = own_redis.dbsize()
    own_redis.config_set("maxmemory-policy", policy)
    with pytest.raises(EvictingRedisError) as refused:
        store.publish("shop", make_trie(20, seed=2))
    assert f"maxmemory-policy is '{policy}'" in str(refused.value)
    assert "noeviction" in str(refused.value)
    assert own_redis.dbsize() == keys_before  # not even a version number was taken
    assert store.current_version("shop") is None
    own_redis.config_set("maxmemory-policy", "noeviction")
    assert store.publish("shop", make_trie(20, seed=2)).version == 1


def test_noeviction_passes(own_redis: redis.Redis) -> None:
    assert eviction_policy(own_redis) == "noeviction"  # Redis' default
    require_no_eviction(own_redis)
