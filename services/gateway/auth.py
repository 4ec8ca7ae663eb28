"""Optional Bearer API keys for the `/v1` routes.

Keys are compared with `hmac.compare_digest` against every configured key (no early exit, so
timing does not tell which key came close) and are never logged or echoed back."""

from __future__ import annotations

import hmac
from collections.abc import Callable
from typing import Annotated

from fastapi import Depends
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from widebeam.services.gateway.errors import ApiError
from widebeam.services.gateway.settings import GatewaySettings

# auto_error=False: a missing header is ours to answer (401 in our error shape, not 403).
_bearer = HTTPBearer(auto_error=False, description="API key (when the gateway has keys)")

ApiKeyDependency = Callable[..., None]


def make_api_key_dependency(settings: GatewaySettings) -> ApiKeyDependency:
    keys = settings.key_values()
    if not keys:
        # An open gateway must not declare a Bearer scheme in its OpenAPI spec: clients and
        # spec-driven tools would then believe every /v1 route needs a key.
        return _open_access

    def require_api_key(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> None:
        given = credentials.credentials.encode() if credentials is not None else b""
        matched = False
        for key in keys:
            matched |= hmac.compare_digest(given, key)
        if not matched:
            raise ApiError(
                401,
                "missing or invalid API key: send the header 'Authorization: Bearer <key>'",
                "invalid_api_key",
                headers={"WWW-Authenticate": 'Bearer realm="widebeam"'},
            )

    return require_api_key


def _open_access() -> None:
    """The `/v1` dependency when no keys are configured."""
