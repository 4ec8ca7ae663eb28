"""Fixtures for the catalog store tests: small tries and a store on the test Redis."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
import redis

from widebeam.services.catalog.sid_layout import SidLayout
from widebeam.services.catalog.store import CatalogStore
from widebeam.services.catalog.trie import SidTrie
from widebeam.services.catalog.types import CatalogEntry

LAYOUT = SidLayout.parse("0:16,16:16,32:16")

MakeTrie = Callable[..., SidTrie]


def entries(n_items: int, seed: int, prefix: str = "item") -> list[CatalogEntry]:
    """Random catalog with some SIDs shared by several items."""
    rng = random.Random(seed)
    pool = [tuple(rng.randrange(16) for _ in range(3)) for _ in range(max(1, n_items * 2 // 3))]
    return [CatalogEntry(f"{prefix}-{seed}-{i}", rng.choice(pool)) for i in range(n_items)]


@pytest.fixture
def make_trie() -> MakeTrie:
    def make(n_items: int = 50, seed: int = 0, prefix: str = "item") -> SidTrie:
        return SidTrie.build(entries(n_items, seed, prefix), LAYOUT)

    return make


@pytest.fixture
def store(redis_client: redis.Redis) -> CatalogStore:
    # Tiny chunks so even small tries span several chunks.
    return CatalogStore(redis_client, retain=5, chunk_bytes=512)
