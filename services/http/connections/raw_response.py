"""HTTP/1.1 answers the connection guard writes itself, outside the app and h11: each one is
the services' JSON error body and closes the connection."""

from __future__ import annotations

import json
from http import HTTPStatus

from widebeam.services.http.errors import ApiError


def raw_error(error: ApiError) -> bytes:
    """`error` as the bytes of a complete response with `Connection: close`."""
    body = json.dumps(error.body()).encode()
    lines = [
        f"HTTP/1.1 {error.status} {HTTPStatus(error.status).phrase}",
        "content-type: application/json",
        f"content-length: {len(body)}",
        "connection: close",
        *(f"{name}: {value}" for name, value in error.headers.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
