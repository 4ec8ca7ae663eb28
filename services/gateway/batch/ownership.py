"""Who may see a batch job: the API key that created it.

With API keys configured a job stores the SHA-256 of its creating key (never the key) and
answers only that key; to any other key it does not exist (404, like an unknown id, so ids
cannot be probed either). With no keys configured there is no owner and every job is visible,
as before; a job created in that mode stays visible to every key later."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable

from fastapi import Request
from fastapi.security.utils import get_authorization_scheme_param

from widebeam.services.gateway.batch.job_store import JobRecord
from widebeam.services.http.api_keys import ApiKeyCheck

# Keys a hash apart from any other use of the same key's digest.
_DOMAIN = b"widebeam batch job owner\x00"

OwnerOf = Callable[[Request], str | None]


def owner_hash(key: str) -> str:
    return hashlib.sha256(_DOMAIN + key.encode()).hexdigest()


def owner_resolver(api_keys: ApiKeyCheck | None) -> OwnerOf:
    """The caller's owner hash from its request (the API-key dependency has checked the key
    already), or None when the gateway has no keys. With keys, never None: a request without
    a Bearer key (which the dependency refuses anyway) owns nothing."""

    def owner_of(request: Request) -> str | None:
        if api_keys is None or api_keys.open:
            return None
        scheme, key = get_authorization_scheme_param(request.headers.get("authorization"))
        return owner_hash(key if scheme.lower() == "bearer" else "")

    return owner_of


def visible_to(job: JobRecord, owner: str | None) -> bool:
    if owner is None or not job.owner:
        return True
    return hmac.compare_digest(job.owner, owner)
