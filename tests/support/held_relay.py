"""A TCP relay in front of a real server whose client-to-server direction a test can hold.

While held, what clients send is kept (in the relay and the kernel's buffers) and reaches the
server only on release, in order; what the server sends still flows. A test can so make a
client's next commands wait for exactly as long as it needs, where `CLIENT PAUSE` (Redis) would
fix the wait in advance and every other client (the test's own too) would wait with it."""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType

CHUNK = 1 << 16


class HeldRelay:
    """`with HeldRelay(port) as relay:` clients connect to `relay.port` instead of `port`;
    `relay.hold()` and `relay.release()` stop and resume their bytes to the server."""

    def __init__(self, target_port: int, host: str = "127.0.0.1") -> None:
        self.target = (host, target_port)
        self._listener = socket.create_server((host, 0))
        self.port = int(self._listener.getsockname()[1])
        # Sends to the server happen under this lock: once hold() returns, nothing a client
        # sent is still on its way (a send begun before the hold has landed).
        self._cond = threading.Condition()
        self._held = False
        self._closed = False
        self._waiting = 0  # sends kept back by the hold right now
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> HeldRelay:
        self._spawn(self._accept)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        _shut(self._listener)  # shutdown wakes the blocked accept(); close alone does not
        for sock in list(self._sockets):
            _shut(sock)
        for thread in self._threads:
            thread.join(10)

    def hold(self) -> None:
        with self._cond:
            self._held = True

    def wait_holding(self, timeout: float) -> None:
        """Until some client has tried to send during the hold (its bytes are kept back)."""
        with self._cond:
            assert self._cond.wait_for(lambda: self._waiting > 0, timeout), (
                f"no client sent anything within {timeout} s of the hold"
            )

    def release(self) -> None:
        with self._cond:
            self._held = False
            self._cond.notify_all()

    def _spawn(self, target: object, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:  # closed by __exit__
                return
            try:
                server = socket.create_connection(self.target, timeout=30)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            self._sockets += [client, server]
            self._spawn(self._pump, client, server, True)
            self._spawn(self._pump, server, client, False)

    def _pump(self, src: socket.socket, dst: socket.socket, upstream: bool) -> None:
        try:
            while data := src.recv(CHUNK):
                if not upstream:
                    dst.sendall(data)
                    continue
                with self._cond:
                    self._waiting += 1
                    self._cond.notify_all()
                    self._cond.wait_for(lambda: not self._held or self._closed)
                    self._waiting -= 1
                    if self._closed:
                        return
                    dst.sendall(data)
        except OSError:
            pass
        finally:  # one side gone: the other sees the connection close, as without the relay
            _shut(src)
            _shut(dst)


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already shut by the other direction's pump
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
