"""Optional Bearer API keys for the `/v1` routes.

Keys are compared with `hmac.compare_digest` against every configured key (no early exit, so
timing does not tell which key came close) and are never logged or echoed back. The route
dependency and the load-shedding middleware (which answers before any route runs) share
`ApiKeyCheck`, so a bad key gets the same 401 from both."""

from __future__ import annotations

import hmac
from collections.abc import Callable, Sequence
from typing import Annotated

from fastapi import Depends
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.security.utils import get_authorization_scheme_param

from widebeam.services.gateway.errors import ApiError
from widebeam.services.gateway.settings import GatewaySettings

# auto_error=False: a missing header is ours to answer (401 in our error shape, not 403).
_bearer = HTTPBearer(auto_error=False, description="API key (when the gateway has keys)")

ApiKeyDependency = Callable[..., None]


def invalid_api_key() -> ApiError:
    return ApiError(
        401,
        "missing or invalid API key: send the header 'Authorization: Bearer <key>'",
        "invalid_api_key",
        headers={"WWW-Authenticate": 'Bearer realm="widebeam"'},
    )


class ApiKeyCheck:
    """The configured keys; `open` when there are none (every request passes)."""

    def __init__(self, keys: Sequence[bytes]) -> None:
        self.keys = tuple(keys)

    @property
    def open(self) -> bool:
        return not self.keys

    def matches(self, given: bytes) -> bool:
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


def make_api_key_dependency(settings: GatewaySettings) -> ApiKeyDependency:
    check = ApiKeyCheck(settings.key_values())
    if check.open:
        # An open gateway must not declare a Bearer scheme in its OpenAPI spec: clients and
        # spec-driven tools would then believe every /v1 route needs a key.
        return _open_access

    def require_api_key(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> None:
        given = credentials.credentials.encode() if credentials is not None else b""
        if not check.matches(given):
            raise invalid_api_key()

    return require_api_key


def _open_access() -> None:
    """The `/v1` dependency when no keys are configured."""
