"""JSON calls to a gateway with retries of what is worth retrying.

Uses the load generator's small HTTP/1.1 client (`widebeam.loadgen.http_client`: keep-alive,
little CPU per request, so the client does not eat the cores the stack is measured on). A 429
or 503 (overloaded, no decoder yet) and a dropped connection are retried after ``Retry-After``
(or a short back-off); any other non-200 answer is a :class:`GatewayError` carrying the
gateway's message.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from widebeam.loadgen.http_client import HttpClient, ProtocolError, Response

RETRIED_STATUSES = frozenset({429, 503})
_MAX_WAIT_S = 5.0


class GatewayError(Exception):
    """The gateway answered a request with an error (or never answered it)."""


class GatewayClient:
    def __init__(
        self, url: str, api_key: str | None, timeout_s: float, retries: int, connections: int
    ) -> None:
        self.http = HttpClient(url.rstrip("/"), max_connections=connections, api_key=api_key)
        self.timeout_s = timeout_s
        self.retries = retries

    async def post(self, path: str, body: dict[str, Any]) -> tuple[dict[str, Any], int]:
        """The answer's JSON and how many retries it took."""
        return await self._call("POST", path, json.dumps(body).encode())

    async def get(self, path: str) -> dict[str, Any]:
        answer, _ = await self._call("GET", path, b"")
        return answer

    async def close(self) -> None:
        await self.http.close()

    async def _call(self, method: str, path: str, body: bytes) -> tuple[dict[str, Any], int]:
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            try:
                response = await asyncio.wait_for(
                    self.http.request(method, path, body), self.timeout_s
                )
            except TimeoutError:
                raise GatewayError(f"{path}: no answer within {self.timeout_s} s") from None
            except (OSError, ProtocolError, asyncio.IncompleteReadError) as exc:
                if last:
                    raise GatewayError(f"{path}: connection failed ({exc!r})") from None
                await asyncio.sleep(min(0.25 * 2**attempt, _MAX_WAIT_S))
                continue
            if response.status == 200:
                return _json(path, response), attempt
            if response.status not in RETRIED_STATUSES or last:
                raise GatewayError(f"{path}: {describe_error(response)}")
            await asyncio.sleep(_retry_after(response, attempt))
        raise AssertionError("unreachable: the last attempt returns or raises")


def describe_error(response: Response) -> str:
    """``"400 invalid_value: n (10) must be <= beam_width (4)"`` from an OpenAI-shaped error."""
    try:
        error = json.loads(response.body)["error"]
        return f"{response.status} {error.get('code') or error.get('type')}: {error['message']}"
    except (ValueError, KeyError, TypeError):
        return f"{response.status}: {response.body[:300].decode('utf-8', 'replace')}"


def _json(path: str, response: Response) -> dict[str, Any]:
    try:
        answer = json.loads(response.body)
    except ValueError:
        raise GatewayError(f"{path}: the answer is not JSON: {response.body[:200]!r}") from None
    if not isinstance(answer, dict):
        raise GatewayError(f"{path}: expected a JSON object, got {type(answer).__name__}")
    return answer


def _retry_after(response: Response, attempt: int) -> float:
    try:
        return min(max(float(response.headers.get("retry-after", "")), 0.0), _MAX_WAIT_S)
    except ValueError:
        return min(0.25 * 2**attempt, _MAX_WAIT_S)
