"""Publishing a version *without* making it current (``activate=false`` uploads).

``CatalogStore.publish`` always moves ``current`` to the newest version. Until the store grows
an ``activate`` flag, this store variant commits with the store's own Lua script, edited so
that the ``current`` pointer never moves; everything else (staging, chunks, lookups, manifest,
event with ``current: 0``, retention) is the store's code. The edit is checked when the app is
created, so a change of the store's script fails loudly instead of silently activating.
"""

from __future__ import annotations

import redis

from widebeam.services.catalog.store import CatalogStore, scripts

_MOVE_RULE = "local move = #top == 0 or tonumber(top[1]) < v or redis.call('EXISTS', KEYS[4]) == 0"


def _no_move_commit() -> str:
    if scripts.COMMIT.count(_MOVE_RULE) != 1:
        raise RuntimeError(
            "catalog store COMMIT script changed: update services/catalog/service/staged_publish.py"
        )
    return scripts.COMMIT.replace(_MOVE_RULE, "local move = false")


def staged_store(client: redis.Redis, namespace: str, retain: int) -> CatalogStore:
    """A CatalogStore whose ``publish`` commits the version but leaves ``current`` alone."""
    store = CatalogStore(client, namespace, retain=retain)
    store._commit = client.register_script(_no_move_commit())  # see module docstring
    return store
