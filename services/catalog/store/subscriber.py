"""CatalogSubscriber: keep the current version of some catalogs loaded in this process.

A background thread loads ``current`` of every followed catalog, then follows the change stream
with XREAD BLOCK. After ANY (re)connect — a dropped connection, a restarted Redis whose stream
is new and empty — it re-reads ``current`` of every catalog, so a lost event only delays an
update. Every load is checksum-verified; a version that fails to load is logged and the previous
one kept. New versions are swapped in atomically: :meth:`get` returns the latest
:class:`LoadedCatalog`, and readers holding an older object keep it, unchanged, for as long as
they hold it (pinning by reference; the subscriber never mutates a published object).
With ``load_in_child`` each version is loaded by a child process and mapped in
(``load_process.py``), so a large load does not hold this process' GIL for seconds; ``derive``
(what the consumer computes from each trie) then runs in the child too.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterable

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from widebeam.services.catalog.store.keys import validate_name
from widebeam.services.catalog.store.load_process import load_in_child
from widebeam.services.catalog.store.store import CatalogStore
from widebeam.services.catalog.store.types import CatalogStoreError, Derive, LoadedCatalog
from widebeam.services.started_in_with import StartedInWith

log = logging.getLogger(__name__)

BACKOFF_MIN_S = 0.1
BACKOFF_MAX_S = 2.0


class CatalogSubscriber(StartedInWith):
    """Follow catalogs ``names`` (None = every catalog in the namespace)."""

    def __init__(
        self,
        redis_url: str,
        names: list[str] | None,
        on_update: Callable[[LoadedCatalog], None] | None = None,
        namespace: str = "widebeam",
        poll_block_ms: int = 1000,
        resync_interval_s: float = 30.0,
        load_in_child: bool = False,
        derive: Derive | None = None,
    ) -> None:
        self.redis_url = redis_url
        self.names = None if names is None else list(names)
        self.on_update = on_update
        self.namespace = namespace
        self.poll_block_ms = int(poll_block_ms)
        # Periodic re-read of `current`: covers events trimmed from the stream while we lagged.
        self.resync_interval_s = resync_interval_s
        # Load each version in a child process (load_process.py): for a process that serves
        # while a large version loads, whose threads the load would otherwise starve.
        self.load_in_child = load_in_child
        self.derive = derive  # its arrays reach on_update as LoadedCatalog.derived
        self.resyncs = 0  # completed full re-reads (for tests and metrics)
        self.last_error: str | None = None
        self._catalogs: dict[str, LoadedCatalog] = {}
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._client: redis.Redis | None = None
        self._store: CatalogStore | None = None
        self._need_resync = True
        self._last_id = b"0-0"
        self._last_resync = 0.0
        if self.names is not None:
            for name in self.names:
                validate_name(name)

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> CatalogSubscriber:
        """Start the background thread (returns at once; see :meth:`wait_ready`)."""
        if self._thread is not None:
            raise RuntimeError("CatalogSubscriber already started")
        self._thread = threading.Thread(target=self._run, name="catalog-subscriber", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float | None = None) -> None:
        """Stop the thread; waits up to ``timeout`` (default: one poll plus slack)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout if timeout is not None else self.poll_block_ms / 1000 + 5)
        if self._client is not None:
            self._client.close()

    # -- readers ------------------------------------------------------------------------------

    def get(self, name: str) -> LoadedCatalog | None:
        """Latest loaded version of ``name``; hold the object to keep using that version."""
        with self._cond:
            return self._catalogs.get(name)

    def acquire(self, name: str) -> LoadedCatalog:
        """Like :meth:`get` but raises LookupError when nothing is loaded for ``name``."""
        loaded = self.get(name)
        if loaded is None:
            raise LookupError(f"catalog {name!r} is not loaded")
        return loaded

    def versions(self) -> dict[str, int]:
        with self._cond:
            return {name: c.version for name, c in self._catalogs.items()}

    @property
    def ready(self) -> bool:
        """True once the first full read of ``current`` has completed."""
        return self._ready.is_set()

    def wait_ready(self, timeout: float | None = None) -> bool:
        return self._ready.wait(timeout)

    def wait_for_version(self, name: str, version: int, timeout: float) -> bool:
        """Block until ``name`` is loaded at exactly ``version``; False on timeout.

        Exact match, not ">=": after a rollback the wanted version is lower than the held one.
        """
        with self._cond:
            return self._cond.wait_for(
                lambda: (c := self._catalogs.get(name)) is not None and c.version == version,
                timeout,
            )

    # -- background thread --------------------------------------------------------------------

    def _run(self) -> None:
        backoff = BACKOFF_MIN_S
        while not self._stop.is_set():
            try:
                stale = time.monotonic() - self._last_resync > self.resync_interval_s
                if self._need_resync or stale:
                    self._resync()
                self._follow()
                backoff = BACKOFF_MIN_S
            except Exception as exc:  # never let the thread die: log, back off, resync
                level = logging.WARNING if isinstance(exc, redis.RedisError) else logging.ERROR
                trace = level == logging.ERROR
                log.log(
                    level, "catalog subscriber: %s; retry in %.1fs", exc, backoff, exc_info=trace
                )
                self.last_error = f"{type(exc).__name__}: {exc}"
                self._need_resync = True
                self._stop.wait(backoff)
                backoff = min(BACKOFF_MAX_S, backoff * 2)

    def _connect(self) -> CatalogStore:
        if self._store is None:
            self._client = redis.Redis.from_url(
                self.redis_url,
                socket_timeout=self.poll_block_ms / 1000 + 5,
                socket_connect_timeout=2.0,
                socket_keepalive=True,
                # No silent retries: every failure must reach _run so it triggers a resync.
                retry=Retry(NoBackoff(), 0),
                redis_connect_func=self._on_connect,
                client_name="widebeam-catalog-subscriber",
            )
            self._store = CatalogStore(self._client, self.namespace)
        return self._store

    def _on_connect(self, connection: redis.connection.AbstractConnection) -> None:
        connection.on_connect()
        # Any new connection (the pool reconnects transparently) may have missed events.
        self._need_resync = True

    def _resync(self) -> None:
        store = self._connect()
        store.client.ping()  # connect first, so the flag it sets is cleared below
        self._need_resync = False
        # Tail id BEFORE reading `current`: a publish after this point has a later event id.
        tail = store.client.xrevrange(store.keys.events, count=1)
        last_id = tail[0][0] if tail else b"0-0"
        for name in self._followed(store):
            self._refresh(store, name)
        self._last_id = last_id
        self._last_resync = time.monotonic()
        self.resyncs += 1
        self.last_error = None
        self._ready.set()

    def _followed(self, store: CatalogStore) -> Iterable[str]:
        if self.names is not None:
            return self.names
        return sorted(set(store.list_catalogs()) | set(self.versions()))

    def _follow(self) -> None:
        store = self._connect()
        resp = store.client.xread(
            {store.keys.events: self._last_id}, count=256, block=self.poll_block_ms
        )
        dirty: list[str] = []
        # RESP2 answers [[stream, entries]], RESP3 {stream: entries}.
        streams = resp.items() if isinstance(resp, dict) else resp or []
        for _stream, entries in streams:
            for entry_id, fields in entries:
                self._last_id = entry_id
                name = fields.get(b"name", b"").decode("utf-8", "replace")
                if (self.names is None or name in self.names) and name not in dirty:
                    dirty.append(name)
        for name in dirty:
            self._refresh(store, name)

    def _refresh(self, store: CatalogStore, name: str) -> None:
        """Load ``current`` of ``name`` unless it is what we already hold."""
        ref = store.current_ref(name)
        if ref is None:
            return  # nothing published (or Redis lost its data): keep serving what we have
        held = self.get(name)
        if held is not None and (held.version, held.artifact_id) == ref:
            return
        try:
            loaded = self._load(store, name, ref[0])
        except CatalogStoreError as exc:
            # A broken or just-retired version: keep the old one; the next event or the
            # periodic resync tries again.
            log.error("catalog subscriber: cannot load %s v%d: %s", name, ref[0], exc)
            self.last_error = f"{type(exc).__name__}: {exc}"
            return
        with self._cond:
            self._catalogs[name] = loaded
            self._cond.notify_all()
        log.info("catalog subscriber: %s now at version %d", name, loaded.version)
        if self.on_update is not None:
            try:
                self.on_update(loaded)
            except Exception:
                log.exception("catalog subscriber: on_update callback failed for %s", name)

    def _load(self, store: CatalogStore, name: str, version: int) -> LoadedCatalog:
        if not self.load_in_child:
            loaded = store.load(name, version)
            if self.derive is None:
                return loaded
            return dataclasses.replace(loaded, derived=self.derive(loaded.trie))
        raw_bytes = int(store.manifest(name, version)["artifact"]["raw_bytes"])
        return load_in_child(
            self.redis_url, self.namespace, name, version, raw_bytes, derive=self.derive
        )
