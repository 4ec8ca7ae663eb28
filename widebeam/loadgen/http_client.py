"""A small HTTP/1.1 client on asyncio streams: keep-alive connections, one request at a time on
each, as many connections as there are requests in flight (up to a limit).

Why not httpx: on the 2-core test machine httpx spent ~10 ms of CPU per request under 64
concurrent requests, so the load generator took more CPU than the stack it measured. This
client needs a small fraction of that. It speaks only what the gateway answers: a status line,
headers, and a body framed by Content-Length or chunked encoding."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

_MAX_HEADER_BYTES = 64 << 10


class ProtocolError(Exception):
    """The server's answer is not HTTP/1.1 as this client understands it."""


class TooManyConnections(Exception):
    """Every connection is busy and the limit is reached (the caller's load is not shed)."""


@dataclass(frozen=True)
class Response:
    status: int
    headers: dict[str, str]  # lower-case names; a repeated header keeps its last value
    body: bytes


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.idle_since = time.monotonic()

    def fresh(self, max_idle_s: float) -> bool:
        """Still usable: not closed by the server and not idle long enough that it may be."""
        return not self.reader.at_eof() and time.monotonic() - self.idle_since < max_idle_s

    async def exchange(self, request: bytes) -> tuple[Response, bool]:
        """Send one request, read its response; also says whether the connection can be reused."""
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        if len(head) > _MAX_HEADER_BYTES:
            raise ProtocolError("response headers too large")
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise ProtocolError(f"bad status line {lines[0]!r}")
        headers = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body = await self._chunked()
        else:
            body = await self.reader.readexactly(int(headers.get("content-length", "0")))
        reusable = headers.get("connection", "").lower() != "close"
        return Response(int(parts[1]), headers, body), reusable

    async def _chunked(self) -> bytes:
        chunks = []
        while True:
            size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await self.reader.readuntil(b"\r\n")  # no trailers from the gateway
                return b"".join(chunks)
            chunks.append(await self.reader.readexactly(size))
            await self.reader.readexactly(2)

    def close(self) -> None:
        self.writer.close()


class HttpClient:
    """`await client.post(path, body)`; `await client.close()` at the end."""

    def __init__(
        self,
        base_url: str,
        max_connections: int = 1024,
        api_key: str | None = None,
        max_idle_s: float = 2.0,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"base URL must be http://HOST:PORT, got {base_url!r}")
        self.host, self.port = parts.hostname, parts.port or 80
        self.max_connections = max_connections
        # Below the server's keep-alive timeout (uvicorn: 5 s), so that a request is never
        # written into a connection the server is closing (it would fail without an answer).
        self.max_idle_s = max_idle_s
        auth = f"Authorization: Bearer {api_key}\r\n" if api_key else ""
        self._fixed_headers = f"Host: {parts.netloc}\r\n{auth}Content-Type: application/json\r\n"
        self._idle: list[_Connection] = []
        self._open = 0

    async def post(self, path: str, body: bytes) -> Response:
        return await self.request("POST", path, body)

    async def get(self, path: str) -> Response:
        return await self.request("GET", path, b"")

    async def request(self, method: str, path: str, body: bytes) -> Response:
        length = f"Content-Length: {len(body)}\r\n\r\n"
        request = f"{method} {path} HTTP/1.1\r\n{self._fixed_headers}{length}".encode() + body
        conn = await self._acquire()
        try:
            response, reusable = await conn.exchange(request)
        except BaseException:
            self._discard(conn)
            raise
        if reusable:
            conn.idle_since = time.monotonic()
            self._idle.append(conn)
        else:
            self._discard(conn)
        return response

    async def close(self) -> None:
        for conn in self._idle:
            conn.close()
        self._idle.clear()

    @property
    def open_connections(self) -> int:
        return self._open

    async def _acquire(self) -> _Connection:
        while self._idle and not self._idle[0].fresh(self.max_idle_s):
            self._discard(self._idle.pop(0))  # the longest idle: closed or about to be
        while self._idle:
            conn = self._idle.pop()
            if conn.fresh(self.max_idle_s):
                return conn
            self._discard(conn)
        if self._open >= self.max_connections:
            raise TooManyConnections(f"{self._open} connections busy")
        self._open += 1
        try:
            reader, writer = await asyncio.open_connection(self.host, self.port)
        except BaseException:
            self._open -= 1
            raise
        return _Connection(reader, writer)

    def _discard(self, conn: _Connection) -> None:
        self._open -= 1
        conn.close()
