"""A TCP socket bound (not yet listening) to a host and port: the one way the gateway's workers
and the decoder's API processes get the port they share."""

from __future__ import annotations

import socket


def bound_socket(host: str, port: int, *, reuse_port: bool, sharing: str = "") -> socket.socket:
    """Bound to host:port (port 0: a free one); ValueError naming the address when it cannot be.
    `reuse_port`: SO_REUSEPORT, so other processes of this user bind the same port (`sharing`
    says who, for the error where the platform lacks it)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not the default 0: asyncio sets TCP_NODELAY only on accepted sockets whose
    # proto says TCP; without it every response waits ~40 ms for a delayed ACK (Nagle).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        if not hasattr(socket, "SO_REUSEPORT"):
            sock.close()
            raise ValueError(f"{sharing or 'sharing a port'} needs SO_REUSEPORT, which this "
                             "platform lacks")  # fmt: skip
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ValueError(f"cannot listen on {host}:{port}: {exc}") from None
    return sock
