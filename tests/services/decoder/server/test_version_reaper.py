"""Replaced catalog versions are freed on the reaper's thread, once nothing refers to them: never
on the engine thread (freeing a large version's mappings blocks its thread for ~0.3 s), and
never while a request still pins them."""

from __future__ import annotations

import asyncio
import os
import random
import sys
import threading
import time
import weakref
from collections.abc import Callable

from tests.services.catalog.test_trie import make_layout, random_catalog
from tests.services.decoder.conftest import SidModel
from widebeam.services.catalog.trie import SidTrie
from widebeam.services.decoder.requests.spec import GenerationRequest
from widebeam.services.decoder.server.async_engine import AsyncEngine
from widebeam.services.decoder.server.served_catalog import ServedCatalog
from widebeam.services.decoder.server.version_reaper import LOWEST_PRIORITY, VersionReaper


def served_version(version: str) -> ServedCatalog:
    layout = make_layout([16, 16, 16], begin=True, end=True)
    trie = SidTrie.build(random_catalog(random.Random(0), [16, 16, 16], 300), layout)
    return ServedCatalog.build("default", trie, version, "cpu")


def freed_on(served: ServedCatalog) -> list[str]:
    """Fills with the name of the thread that frees `served`."""
    threads: list[str] = []
    weakref.finalize(served, lambda: threads.append(threading.current_thread().name))
    return threads


def wait_until(predicate: Callable[[], bool], timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_a_pinned_version_is_kept_until_released_then_freed_by_the_reaper() -> None:
    reaper = VersionReaper(poll_s=0.01).start()
    try:
        served = served_version("1")
        threads = freed_on(served)
        pin = served.constraint  # what an admitted request holds
        api_call = served  # what a Recommend call in flight holds
        reaper.retire(served)
        reaper.retire(served)  # twice: still freed once
        del served
        time.sleep(0.2)  # twenty polls
        assert threads == [] and reaper.pending == 1
        del pin
        time.sleep(0.2)
        assert threads == [] and reaper.pending == 1
        del api_call
        assert wait_until(lambda: threads != [])
        assert threads == ["catalog-reaper"]
        assert reaper.pending == 0 and reaper.freed == 1
    finally:
        reaper.stop()


def test_an_unpinned_version_goes_at_the_next_poll_and_stop_ends_the_thread() -> None:
    reaper = VersionReaper(poll_s=0.01).start()
    served = served_version("1")
    threads = freed_on(served)
    reaper.retire(served)
    del served
    assert wait_until(lambda: threads == ["catalog-reaper"])
    if sys.platform.startswith("linux"):  # freed in the cores' idle time, not the servers'
        tid = reaper._thread.native_id
        assert tid is not None and os.getpriority(os.PRIO_PROCESS, tid) == LOWEST_PRIORITY
    reaper.stop()
    assert not reaper._thread.is_alive()


def test_a_swapped_out_version_is_not_freed_on_the_engine_thread(sid_model: SidModel) -> None:
    engine = sid_model.engine(max_rows=16, max_kv_slots=4096)
    request = GenerationRequest(request_id="r", input_ids=(1, 2), beam_width=4, n=2,
                                constrained=True)  # fmt: skip

    async def scenario() -> list[str]:
        async_engine = AsyncEngine(engine, max_waiting=8).start()
        try:
            old = async_engine.catalogs()["default"]
            threads = freed_on(old)
            first = await async_engine.generate(request, timeout=60)
            assert first.catalog_version == old.version
            new = ServedCatalog.build("default", old.constraint.trie, "2", "cpu")
            del old
            async_engine.swap_catalog("default", new)
            assert await asyncio.to_thread(async_engine.wait_for_swaps, 30)
            second = await async_engine.generate(request, timeout=60)
            assert second.catalog_version == "2"
            assert [b.item_ids for b in second.beams] == [b.item_ids for b in first.beams]
            assert await asyncio.to_thread(wait_until, lambda: threads != [])
            return threads
        finally:
            async_engine.stop()

    assert asyncio.run(scenario()) == ["catalog-reaper"]
