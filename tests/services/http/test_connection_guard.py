"""The connection guard (uvicorn in a thread, real sockets) does not cut off a client that is not
at fault: a body the app is slow to read, a `100 Continue` body the app has not asked for yet,
a kept-alive connection idle between requests for longer than the head deadline. The guard's
cuts themselves are tested against both real services (tests/services/*/test_slow_clients.py).
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn

from tests.support.raw_http import answer, connect, read_to_close, request_head
from widebeam.services.http.connections import ConnectionPolicy, guarded_protocol

# The head and body deadlines; the app and the client below wait far longer. Generous: once the
# app reads, the rest of the body must move within it, and on two busy cores 0.5 s was not
# always enough (a fresh-clone run answered 408).
TIMEOUT_S = 2.0
# Not a whole number of deadlines: the app asks for the body half a deadline after the body
# timer's last check, so a client answering the `100 Continue` a little late is past that
# timer's next check (the guard must count its time from the 100, not from that check).
# 2.5 deadlines: the body timer finds the app holding the body back twice in a row (a re-armed
# hold is covered) before the half-deadline offset; more whole deadlines add only waiting
# (each test sleeps this once or twice), no case the guard would meet differently.
APP_PAUSE_S = 2.5 * TIMEOUT_S
CONTINUE_REPLY_S = 0.6 * TIMEOUT_S  # how long the client takes to send its body after the 100
BODY = 1 << 20  # over uvicorn's 64 KiB read-ahead: reading pauses until the app asks


async def slow_reader(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Waits APP_PAUSE_S before it reads the body, then answers its length."""
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    if scope["method"] == "POST":
        await asyncio.sleep(APP_PAUSE_S)
    size, more = 0, True
    while more:
        message = await receive()
        size += len(message.get("body", b""))
        more = message.get("more_body", False)
    body = str(size).encode()
    headers = [(b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    policy = ConnectionPolicy(
        header_timeout_s=TIMEOUT_S,
        body_timeout_s=TIMEOUT_S,
        max_connections=64,
        max_connections_per_client=16,
    )
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(
        slow_reader,
        http=guarded_protocol(policy),
        timeout_keep_alive=600,
        log_config=None,
        log_level="warning",
        loop="asyncio",
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.01)
    yield int(sock.getsockname()[1])
    server.should_exit = True
    thread.join(15)


def response_body(sock: socket.socket) -> bytes:
    """Status 200 and the body of one small response (its length fits one read)."""
    sock.settimeout(120)
    data = b""
    while b"\r\n\r\n" not in data:
        data += _more(sock)
    head, body = data.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200"), head
    length = int(next(v for k, v in _headers(head) if k == b"content-length"))
    while len(body) < length:
        body += _more(sock)
    return body


def _more(sock: socket.socket) -> bytes:
    chunk = sock.recv(4096)
    assert chunk, "the server closed the connection"
    return chunk


def _headers(head: bytes) -> Iterator[tuple[bytes, bytes]]:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        yield name.strip().lower(), value.strip()


def test_a_body_the_app_is_slow_to_read_is_not_a_stall(port: int) -> None:
    with connect(port) as sock:
        sock.sendall(request_head("POST", "/", {"Content-Length": str(BODY)}) + b"x" * BODY)
        assert response_body(sock) == str(BODY).encode()


def test_a_100_continue_body_waits_for_the_app(port: int) -> None:
    head = request_head("POST", "/", {"Content-Length": "5", "Expect": "100-continue"})
    with connect(port) as sock:
        sock.sendall(head)
        assert answer(sock) == 100  # only once the app reads, after its pause
        time.sleep(CONTINUE_REPLY_S)  # within the deadline counted from the 100
        sock.sendall(b"hello")
        assert response_body(sock) == b"5"


def test_a_kept_alive_connection_may_idle_past_the_head_deadline(port: int) -> None:
    with connect(port) as sock:
        for _ in range(2):
            sock.sendall(request_head("GET", "/"))
            assert response_body(sock) == b"0"
            time.sleep(APP_PAUSE_S)  # idle between requests: keep-alive's to judge
        sock.sendall(request_head("GET", "/", {"Connection": "close"}))
        assert response_body(sock) == b"0"
        assert read_to_close(sock) == b""
