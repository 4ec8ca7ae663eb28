"""The catalog service's exceptions -> `ApiError` (the shared body, `widebeam.services.http`).

Status codes (docs/catalog.md): 400 a malformed request (bad name, parameter, layout spec,
metadata, no layout at all); 401 missing/wrong API key; 404 unknown catalog/version/item/SID;
413 upload over the size limit; 422 an invalid catalog (every ``CatalogError``, whose message
names the row/key); 503 Redis unreachable, or Redis lost a publish's state before its commit
(both with ``Retry-After``), or Redis is configured to evict keys (``redis_evicting``: no
``Retry-After``, an operator must change the policy first). Nothing a client sends may produce
a 500.
"""

from __future__ import annotations

import logging

import redis

from widebeam.services.catalog.store import (
    EvictingRedisError,
    InvalidNameError,
    StagingLostError,
    VersionNotFoundError,
)
from widebeam.services.catalog.types import CatalogError
from widebeam.services.http.errors import ApiError, retry_later

log = logging.getLogger("widebeam.catalog.service")

RETRY_AFTER_S = 5
# After a lost publish Redis answers again (it replied to the commit): upload again at once.
RETRY_LOST_PUBLISH_S = 1
# Catalog errors quote the offending value (an item id, a key); a hostile upload can make that
# value megabytes long, and it must not come back in the response or go to the log whole.
MAX_MESSAGE_CHARS = 1000
# What `to_api_error` translates (the app routes these exception types through it).
TRANSLATED = (
    CatalogError,
    InvalidNameError,
    VersionNotFoundError,
    StagingLostError,
    EvictingRedisError,
    redis.RedisError,
)


def clip(message: str) -> str:
    if len(message) <= MAX_MESSAGE_CHARS:
        return message
    return f"{message[:MAX_MESSAGE_CHARS]}... ({len(message) - MAX_MESSAGE_CHARS} more characters)"


def redis_unavailable(message: str) -> ApiError:
    return retry_later(503, message, "redis_unavailable", RETRY_AFTER_S)


def to_api_error(exc: BaseException) -> ApiError | None:
    """The ApiError for a known exception type; None for a genuine server bug."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, CatalogError):
        return ApiError(422, clip(str(exc)), "invalid_catalog")
    if isinstance(exc, InvalidNameError):
        return ApiError(400, str(exc), "invalid_name", param="name")
    if isinstance(exc, VersionNotFoundError):
        return ApiError(404, str(exc), "not_found", param="version")
    if isinstance(exc, EvictingRedisError):
        log.error("%s", exc)
        return ApiError(503, str(exc), "redis_evicting")
    if isinstance(exc, StagingLostError):
        log.warning("%s", exc)
        return retry_later(503, str(exc), "catalog_state_lost", RETRY_LOST_PUBLISH_S)
    if isinstance(exc, redis.RedisError):
        # Only the exception type: redis-py messages can carry host names, never the password.
        log.warning("Redis unavailable: %s: %s", type(exc).__name__, exc)
        return redis_unavailable(
            f"the catalog store (Redis) is unavailable ({type(exc).__name__}); retry later"
        )
    return None
