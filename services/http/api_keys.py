"""Bearer API keys: the check and the route dependency both services use.

Keys are compared with `hmac.compare_digest` against every configured key (no early exit, so
timing does not tell which key came close) and are never logged or echoed back. A missing,
malformed or wrong key is one 401 with `WWW-Authenticate: Bearer realm=...`; each service keeps
its realm and its documented error code. With no keys configured every request passes and the
OpenAPI spec declares no Bearer scheme.

The dependencies are coroutines: FastAPI runs a plain function dependency on its threadpool,
so every request would wait for a free thread there, and routes that block threads (batch-job
polls while Redis hangs) would then stall routes that never touch Redis."""

from __future__ import annotations

import hmac
from collections.abc import Callable, Coroutine, Sequence
from typing import Annotated, Any

from fastapi import Depends
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.security.utils import get_authorization_scheme_param

from widebeam.services.http.errors import ApiError

# auto_error=False: a missing header is ours to answer (401 in our error shape, not 403).
_bearer = HTTPBearer(auto_error=False, description="API key")

ApiKeyDependency = Callable[..., Coroutine[Any, Any, None]]


class ApiKeyCheck:
    """The configured keys; `open` when there are none (every request passes)."""

    def __init__(self, keys: Sequence[bytes], realm: str, code: str) -> None:
        self.keys = tuple(keys)
        self.realm = realm
        self.code = code

    @property
    def open(self) -> bool:
        return not self.keys

    def matches(self, given: bytes) -> bool:
        if not given:  # so a key configured as "" locks the routes rather than opening them
            return False
        matched = False
        for key in self.keys:  # every key, no early exit
            matched |= hmac.compare_digest(given, key)
        return matched

    def header_ok(self, authorization: str | None) -> bool:
        """Whether a raw `Authorization` header value carries a configured key, parsed as
        `HTTPBearer` parses it (scheme `Bearer`, case-insensitive, then the key)."""
        if self.open:
            return True
        scheme, credentials = get_authorization_scheme_param(authorization)
        if not (scheme and credentials) or scheme.lower() != "bearer":
            credentials = ""
        return self.matches(credentials.encode())

    def rejection(self) -> ApiError:
        return ApiError(
            401,
            "missing or invalid API key: send the header 'Authorization: Bearer <key>'",
            self.code,
            headers={"WWW-Authenticate": f'Bearer realm="{self.realm}"'},
        )

    def dependency(self) -> ApiKeyDependency:
        """The FastAPI dependency of the routes that need a key."""
        if self.open:
            # An open service must not declare a Bearer scheme in its OpenAPI spec: clients
            # and spec-driven tools would then believe its routes need a key.
            return _open_access

        async def require_api_key(
            credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
        ) -> None:
            given = credentials.credentials.encode() if credentials is not None else b""
            if not self.matches(given):
                raise self.rejection()

        return require_api_key


async def _open_access() -> None:
    """The dependency when no keys are configured."""
