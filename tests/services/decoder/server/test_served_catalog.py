"""A served catalog version is freed by reference counting: when the last request pinning an
old version ends, its memory goes at once on that thread (no reference cycle leaves it for the
collector, whose pass over the serving process would hold the GIL far longer)."""

from __future__ import annotations

import gc
import random
import weakref

from tests.services.catalog.test_trie import make_layout, random_catalog
from widebeam.services.catalog.trie import SidTrie
from widebeam.services.decoder.server.served_catalog import ServedCatalog


def test_a_dropped_version_is_freed_without_the_collector() -> None:
    layout = make_layout([16, 16, 16], begin=True, end=True)
    trie = SidTrie.build(random_catalog(random.Random(0), [16, 16, 16], 300), layout)
    served = ServedCatalog.build("default", trie, "7", "cpu")
    served.constraint.sid_columns(())  # the caches a served version fills
    constraint = served.constraint
    parts = [served, constraint, trie, constraint.path_items, constraint.child_tokens]
    parts.append(served.index)
    alive = [weakref.ref(part) for part in parts]
    del trie, constraint, parts
    gc.disable()
    try:
        served = None
        assert [ref() for ref in alive] == [None] * len(alive)
    finally:
        gc.enable()
