"""Follow catalogs published in Redis and swap new versions into the engine without a restart.

The subscriber thread does the expensive part — trie tensors on the device and the item index —
so the engine thread only swaps a reference between two steps. Requests pin the version current
at their admission; an old version is freed once no request holds it.
"""

from __future__ import annotations

import logging

import torch

from widebeam.services.catalog.sid_layout import SidLayout
from widebeam.services.catalog.store import CatalogSubscriber, LoadedCatalog
from widebeam.services.decoder.constraint.trie_arrays import constraint_arrays
from widebeam.services.decoder.server.async_engine import AsyncEngine
from widebeam.services.decoder.server.served_catalog import ServedCatalog, check_layout

log = logging.getLogger(__name__)


class CatalogSync:
    def __init__(
        self,
        engine: AsyncEngine,
        redis_url: str,
        names: list[str] | None,
        model_layout: SidLayout | None,
        device: torch.device | str,
        namespace: str = "widebeam",
    ) -> None:
        self.engine = engine
        self.model_layout = model_layout
        self.device = device
        self.rejected: dict[str, str] = {}  # name -> why its latest version was not served
        # Versions load in a child process: a large one would starve the serving threads of
        # the GIL for seconds (issue 21: 10M items under traffic). The child also derives the
        # trie tensors' host arrays, seconds of CPU this process would spend beside serving.
        self.subscriber = CatalogSubscriber(
            redis_url, names, on_update=self._on_update, namespace=namespace,
            load_in_child=True, derive=constraint_arrays,
        )  # fmt: skip

    def start(self) -> CatalogSync:
        self.subscriber.start()
        return self

    def stop(self) -> None:
        self.subscriber.stop()

    def _on_update(self, loaded: LoadedCatalog) -> None:
        """Runs on the subscriber thread for every newly loaded version."""
        where = f"catalog {loaded.name!r} version {loaded.version}"
        try:
            check_layout(loaded.trie, self.model_layout, self.engine.engine.vocab_size)
        except ValueError as exc:
            log.error("%s not served: %s", where, exc)
            self.rejected[loaded.name] = f"version {loaded.version}: {exc}"
            return
        try:
            served = ServedCatalog.build(
                loaded.name, loaded.trie, str(loaded.version), self.device, loaded.derived or None
            )
        except ValueError as exc:  # derived arrays that do not fit the trie
            log.error("%s not served: %s", where, exc)
            self.rejected[loaded.name] = f"version {loaded.version}: {exc}"
            return
        self.rejected.pop(loaded.name, None)
        self.engine.swap_catalog(loaded.name, served)
        log.info("%s ready (%d items); swapping in", where, loaded.trie.num_items)
