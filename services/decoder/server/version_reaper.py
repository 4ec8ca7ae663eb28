"""Frees retired catalog versions on a thread of their own, never on the engine thread.

A version loaded by the load child lives in shared-memory mappings: freeing a 10M-item one
unmaps ~1.2 GB of tmpfs pages, about 0.3 s in the kernel on this project's 2-core machine. The
GIL is released meanwhile, but the thread that drops the last reference is blocked, and the
last reference to an old version is usually dropped by the engine thread (the swap that
replaces it, or the last request that pinned it finishing), so every request in flight would
wait for the unmapping. Here the replaced version is handed to the reaper, which keeps it alive
until nothing but itself refers to it (no request pins its constraint, no API call holds it),
then drops it on its own thread, which runs at the lowest CPU priority (Linux keeps a nice
value per thread): the kernel's page freeing is done in that thread, so it takes the cores'
idle time instead of the serving threads'. A busy machine only delays when the memory goes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading

from widebeam.services.decoder.server.served_catalog import ServedCatalog

log = logging.getLogger(__name__)

LOWEST_PRIORITY = 19  # nice value of the reaper's thread


def _baselines() -> tuple[int, int]:
    """sys.getrefcount of an object only a list holds, read as `list[i]`, and of a field only
    its frozen dataclass holds, read as `holder.field`: what a retired version and its
    constraint read when nothing else refers to them. Measured, not assumed: what the call
    itself adds differs between Python versions."""
    listed = [object()]
    holder = ServedCatalog("probe", object(), object())  # type: ignore[arg-type]
    return sys.getrefcount(listed[0]), sys.getrefcount(holder.constraint)


class VersionReaper:
    def __init__(self, poll_s: float = 0.1) -> None:
        self.poll_s = poll_s
        self.freed = 0  # versions dropped so far (tests and logs)
        self._only_listed, self._only_in_version = _baselines()
        self._retired: list[ServedCatalog] = []
        self._cond = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="catalog-reaper", daemon=True)

    def start(self) -> VersionReaper:
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop polling; versions still retired are left to ordinary reference counting."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join(timeout)

    def retire(self, served: ServedCatalog) -> None:
        """Keep `served` until it is unreferenced, then free it here (any thread may call)."""
        with self._cond:
            if any(held is served for held in self._retired):
                return  # listed twice, its count would never fall to the baseline
            self._retired.append(served)
            self._cond.notify_all()

    @property
    def pending(self) -> int:
        with self._cond:
            return len(self._retired)

    def _run(self) -> None:
        with contextlib.suppress(AttributeError, OSError):  # no per-thread nice here: as is
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), LOWEST_PRIORITY)
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._stopping or bool(self._retired))
                if self._stopping:
                    return
            self._drop_unreferenced()
            with self._cond:
                if self._stopping:
                    return
                self._cond.wait(self.poll_s)

    def _drop_unreferenced(self) -> None:
        with self._cond:
            keep, free = [], []
            for index in range(len(self._retired)):
                (free if self._unreferenced(index) else keep).append(self._retired[index])
            self._retired = keep
        for served in free:
            log.info("catalog %s version %s freed", served.name, served.version)
        self.freed += len(free)
        free.clear()  # the versions' memory goes here, outside the lock

    def _unreferenced(self, index: int) -> bool:
        # Indexing, not a loop variable: a local name would be one more reference.
        return (
            sys.getrefcount(self._retired[index]) == self._only_listed
            and sys.getrefcount(self._retired[index].constraint) == self._only_in_version
        )
