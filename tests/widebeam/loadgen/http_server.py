"""A small real HTTP/1.1 server on asyncio (loopback, free port) for the load generator's own
tests: each path answers one way the gateway can answer."""

from __future__ import annotations

import asyncio
import json

_ROUTES = {
    "/ok": (200, {}, {"ok": True}),
    "/shed": (429, {"Retry-After": "1"}, {"error": {"message": "busy"}}),
    "/shed-without-retry-after": (503, {}, {"error": {"message": "down"}}),
    "/close": (200, {"Connection": "close"}, {"ok": True}),
}


class HttpTestServer:
    """`async with HttpTestServer() as server:` serves on `server.url`; `/chunked` answers in
    chunks, `/slow` after 0.3 s, `/drop` closes the connection without answering, and with
    `close_after_each` every connection is closed right after its first answer (a server whose
    keep-alive timeout fired)."""

    def __init__(self, close_after_each: bool = False) -> None:
        self.close_after_each = close_after_each
        self.connections = 0
        self.requests = 0
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def __aenter__(self) -> HttpTestServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
                length = next(
                    (int(h.split(":")[1]) for h in head.split("\r\n") if h.lower().startswith(
                        "content-length")), 0,
                )  # fmt: skip
                await reader.readexactly(length)
                self.requests += 1
                path = head.split(" ")[1]
                if path == "/drop":
                    break
                if path == "/slow":
                    await asyncio.sleep(0.3)
                writer.write(_answer(path))
                await writer.drain()
                if self.close_after_each or path == "/close":
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def _answer(path: str) -> bytes:
    if path == "/chunked":
        body = json.dumps({"ok": "chunked"}).encode()
        chunks = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (body[:5], body[5:]))
        head = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        return head.encode() + chunks + b"0\r\n\r\n"
    status, headers, payload = _ROUTES.get(path, (200, {}, {"ok": True}))
    body = json.dumps(payload).encode()
    lines = [f"HTTP/1.1 {status} X", f"Content-Length: {len(body)}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body
