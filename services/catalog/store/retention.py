"""Retention: keep the newest N committed versions (and always `current`), drop the rest, and
garbage-collect versions whose publisher died before committing."""

from __future__ import annotations

import logging
import time

import redis
from redis.commands.core import Script

from widebeam.services.catalog.store.keys import CatalogKeys, VersionKeys

log = logging.getLogger(__name__)

SCAN_BATCH = 1000


def unlink_version(client: redis.Redis, vkeys: VersionKeys) -> int:
    """UNLINK every key under the version's prefix in batches; returns how many were removed."""
    removed = 0
    batch: list[bytes] = []
    # UNLINK frees large values in a background thread, so this never stalls Redis.
    for key in client.scan_iter(match=vkeys.pattern, count=SCAN_BATCH):
        batch.append(key)
        if len(batch) >= SCAN_BATCH:
            removed += int(client.unlink(*batch))
            batch.clear()
    if batch:
        removed += int(client.unlink(*batch))
    return removed


def prune(
    client: redis.Redis, ckeys: CatalogKeys, retain: int, staging_ttl_s: float, retire: Script
) -> list[int]:
    """Apply retention to one catalog; returns the committed versions it deleted."""
    versions = [int(v) for v in client.zrevrange(ckeys.versions, 0, -1)]
    deleted = []
    for version in versions[retain:]:
        vkeys = ckeys.version(version)
        # The script re-checks `current` atomically: an activate racing with us wins.
        keys = [ckeys.versions, ckeys.current, vkeys.manifest, vkeys.lookup]
        if retire(keys=keys, args=[version]):
            unlink_version(client, vkeys)
            deleted.append(version)
    cutoff = time.time() - staging_ttl_s
    for raw in client.zrangebyscore(ckeys.staging, "-inf", cutoff):
        version = int(raw)
        # ZREM decides which collector owns it; the dead publisher's commit would now fail.
        if client.zrem(ckeys.staging, raw):
            log.warning("catalog %s: removing abandoned staged version %d", ckeys.prefix, version)
            unlink_version(client, ckeys.version(version))
    return deleted
