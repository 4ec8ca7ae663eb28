"""Refusing a Redis that may evict catalog data.

A catalog version is many keys (manifest, chunks, lookup tables, `current`); a Redis whose
`maxmemory-policy` evicts keys under memory pressure drops some of them, and a catalog that
loaded yesterday fails today, or a publish evicts other catalogs' chunks. Every policy but
`noeviction` can do that: the `allkeys-*` policies take any key, the `volatile-*` ones the keys
with a time-to-live, which every staged chunk of a publish in progress has. With `noeviction`
Redis refuses the write instead (an OOM error), which a publish reports and leaves nothing
half-written behind."""

from __future__ import annotations

import logging

import redis

from widebeam.services.catalog.store.types import CatalogStoreError

log = logging.getLogger(__name__)

SAFE_POLICY = "noeviction"


class EvictingRedisError(CatalogStoreError):
    """Redis is configured to evict keys: catalogs stored there could lose parts of a version."""


def eviction_policy(client: redis.Redis) -> str | None:
    """The server's `maxmemory-policy`, or None where `CONFIG GET` is not allowed (managed
    services often rename or forbid CONFIG)."""
    try:
        found = client.config_get("maxmemory-policy")
    except redis.ResponseError as exc:
        log.warning("cannot read Redis' maxmemory-policy (%s); it must be %s", exc, SAFE_POLICY)
        return None
    value = found.get("maxmemory-policy", found.get(b"maxmemory-policy"))
    return value.decode() if isinstance(value, bytes) else value


def require_no_eviction(client: redis.Redis) -> None:
    """Raise `EvictingRedisError` unless the server's policy is `noeviction` (or unreadable)."""
    policy = eviction_policy(client)
    if policy is not None and policy != SAFE_POLICY:
        raise EvictingRedisError(
            f"Redis' maxmemory-policy is {policy!r}: under memory pressure it evicts keys, "
            "which would delete parts of stored catalog versions. Set "
            f"'maxmemory-policy {SAFE_POLICY}' (redis.conf or CONFIG SET) and retry"
        )
