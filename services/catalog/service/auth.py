"""Bearer-key check for write routes (reads are open: catalogs hold no secrets and the
gateway/decoder read them without credentials; put the service behind a network policy when
that matters).

The key is compared with ``hmac.compare_digest`` (constant time) and never echoed: error
messages and logs say only *that* the key was missing or wrong.
"""

from __future__ import annotations

import hmac

from fastapi import Request

from widebeam.services.catalog.service.errors import ApiError
from widebeam.services.catalog.service.state import ServiceState

_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="widebeam-catalog"'}
_INVALID = {"WWW-Authenticate": 'Bearer realm="widebeam-catalog", error="invalid_token"'}


def require_write_access(request: Request) -> None:
    """FastAPI dependency of every POST route; a no-op when no key is configured."""
    state: ServiceState = request.app.state.catalog
    expected = state.settings.api_key
    if expected is None:
        return
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ApiError(
            401,
            "unauthorized",
            "this route needs 'Authorization: Bearer <api key>'",
            _CHALLENGE,
        )
    given = token.strip().encode("utf-8")
    if not hmac.compare_digest(given, expected.get_secret_value().encode("utf-8")):
        raise ApiError(401, "unauthorized", "invalid API key", _INVALID)
