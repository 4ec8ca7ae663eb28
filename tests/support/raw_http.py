"""Raw HTTP/1.1 over sockets, for tests of what a server does with slow, partial and hostile
connections (what an HTTP client library will not send): connections from a chosen loopback
address, answers read by status line, many connections watched until the server closes them."""

from __future__ import annotations

import selectors
import socket
import time

HANG_GUARD_S = 120.0  # waits for the server end here; a machine's speed never decides a test


def connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    """A TCP connection to 127.0.0.1:`port` from `source` (any 127.x.y.z: all are loopback)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((source, 0))
    sock.settimeout(HANG_GUARD_S)
    sock.connect(("127.0.0.1", port))
    return sock


def request_head(method: str, path: str, headers: dict[str, str] | None = None) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: test"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def answer(sock: socket.socket, timeout: float = HANG_GUARD_S) -> int | None:
    """The status of the response that arrives on `sock`, None when the server closes it
    without one. No answer within `timeout`: AssertionError (a hang guard, not a bound)."""
    sock.settimeout(timeout)
    data = b""
    try:
        while b"\r\n" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
    except TimeoutError:
        raise AssertionError(f"no answer and no close within {timeout:g}s") from None
    except ConnectionResetError:
        pass
    return status_of(data)


def read_to_close(sock: socket.socket, timeout: float = HANG_GUARD_S) -> bytes:
    """The rest of what arrives on `sock` until the server closes it (hang guard: `timeout`)."""
    sock.settimeout(timeout)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except TimeoutError:
        raise AssertionError(f"the connection is still open after {timeout:g}s") from None
    except ConnectionResetError:
        pass
    return data


def status_of(data: bytes) -> int | None:
    if not data.startswith(b"HTTP/1."):
        return None
    return int(data.split(b" ", 2)[1])


def get(port: int, path: str, source: str = "127.0.0.1") -> int | None:
    """Status of `GET path` on a new connection from `source`."""
    with connect(port, source) as sock:
        sock.sendall(request_head("GET", path))
        return answer(sock)


def closed_by_server(socks: list[socket.socket], timeout: float = HANG_GUARD_S) -> list[int | None]:
    """Waits until the server has closed every one of `socks`; the status each got (None: none,
    just closed). Some still open after `timeout`: AssertionError saying how many."""
    statuses: list[int | None] = []
    received = {sock.fileno(): b"" for sock in socks}
    with selectors.DefaultSelector() as selector:
        for sock in socks:
            sock.setblocking(False)
            selector.register(sock, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                open_ = len(selector.get_map())
                raise AssertionError(f"{open_} of {len(socks)} connections still open")
            for key, _ in selector.select(min(left, 1.0)):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                try:
                    chunk = sock.recv(65536)
                except ConnectionResetError:
                    chunk = b""
                if chunk:
                    received[sock.fileno()] += chunk
                    continue
                statuses.append(status_of(received[sock.fileno()]))
                selector.unregister(sock)
    return statuses


def send_counted(sock: socket.socket, total: int, chunk: int = 64 << 10) -> int:
    """Sends up to `total` bytes of body; returns how many the server let in before it closed
    the connection (its socket buffers included)."""
    sent = 0
    block = b"x" * chunk
    try:
        while sent < total:
            sent += sock.send(block[: min(chunk, total - sent)])
    except (BrokenPipeError, ConnectionResetError):
        pass
    except TimeoutError:
        raise AssertionError(f"the server neither read nor closed after {sent} bytes") from None
    return sent
