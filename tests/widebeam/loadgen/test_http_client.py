"""The load generator's HTTP client against a real server on loopback."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.widebeam.loadgen.http_server import HttpTestServer
from widebeam.loadgen.http_client import HttpClient, TooManyConnections


def test_keep_alive_chunked_bodies_and_connection_close() -> None:
    async def scenario() -> tuple[list[int], bytes, int, int]:
        async with HttpTestServer() as server:
            client = HttpClient(server.url)
            statuses = [(await client.post("/ok", b"{}")).status for _ in range(5)]
            chunked = (await client.get("/chunked")).body
            reused = server.connections  # one connection for all of the above
            await client.post("/close", b"{}")
            await client.post("/ok", b"{}")
            await client.close()
            return statuses, chunked, reused, server.connections

    statuses, chunked, reused, connections = asyncio.run(scenario())
    assert statuses == [200] * 5 and json.loads(chunked) == {"ok": "chunked"}
    assert reused == 1 and connections == 2


def test_headers_of_a_shed_answer() -> None:
    async def scenario() -> tuple[int, dict[str, str]]:
        async with HttpTestServer() as server:
            client = HttpClient(server.url)
            response = await client.post("/shed", b"{}")
            await client.close()
            return response.status, response.headers

    status, headers = asyncio.run(scenario())
    assert status == 429 and headers["retry-after"] == "1"


def test_connections_closed_or_idle_too_long_are_not_reused() -> None:
    async def scenario(close_after_each: bool, max_idle_s: float) -> tuple[list[int], int]:
        async with HttpTestServer(close_after_each=close_after_each) as server:
            client = HttpClient(server.url, max_idle_s=max_idle_s)
            statuses = []
            for _ in range(3):
                statuses.append((await client.post("/ok", b"{}")).status)
                await asyncio.sleep(0.15)
            await client.close()
            return statuses, server.connections

    # The server closed each connection after one answer (its keep-alive timeout fired).
    assert asyncio.run(scenario(True, 60.0)) == ([200] * 3, 3)
    # Idle longer than max_idle_s: dropped before the server might close it.
    assert asyncio.run(scenario(False, 0.1)) == ([200] * 3, 3)
    assert asyncio.run(scenario(False, 60.0)) == ([200] * 3, 1)


def test_connection_limit_and_a_dropped_connection() -> None:
    async def scenario() -> tuple[list[object], int, type[BaseException]]:
        async with HttpTestServer() as server:
            client = HttpClient(server.url, max_connections=2)
            calls = [client.post("/slow", b"{}") for _ in range(3)]
            results = await asyncio.gather(*calls, return_exceptions=True)
            with pytest.raises(asyncio.IncompleteReadError) as dropped:
                await client.post("/drop", b"{}")
            open_after = client.open_connections
            await client.close()
            return results, open_after, dropped.type

    results, open_after, dropped = asyncio.run(scenario())
    assert [getattr(r, "status", type(r)) for r in results] == [200, 200, TooManyConnections]
    assert open_after == 1 and dropped is asyncio.IncompleteReadError  # the dropped one is gone


def test_only_plain_http_urls() -> None:
    with pytest.raises(ValueError, match="http://HOST:PORT"):
        HttpClient("https://example.org")
