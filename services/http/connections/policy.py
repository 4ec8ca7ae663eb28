"""`ConnectionPolicy`: the limits one server's connections live under, from its settings."""

from __future__ import annotations

import logging
import resource
from dataclasses import dataclass
from typing import Protocol

log = logging.getLogger("widebeam.http.connections")

# File descriptors kept free of client connections: Redis and gRPC clients, spooled uploads,
# logs. Without them a full house of clients would make the service's own calls fail.
RESERVED_FDS = 128


class ConnectionSettings(Protocol):
    """The fields a service's settings carry for its connection guard."""

    header_timeout_s: float
    body_timeout_s: float
    max_connections: int
    max_connections_per_client: int


@dataclass(frozen=True)
class ConnectionPolicy:
    header_timeout_s: float  # a request's head (request line and headers) arrives within this
    body_timeout_s: float  # longest pause between body bytes the server is waiting for
    max_connections: int  # open connections of all clients together
    max_connections_per_client: int  # open connections from one client address

    def __post_init__(self) -> None:
        if self.header_timeout_s <= 0 or self.body_timeout_s <= 0:
            raise ValueError("header_timeout_s and body_timeout_s must be > 0")
        if self.max_connections < 1 or self.max_connections_per_client < 1:
            raise ValueError("max_connections and max_connections_per_client must be >= 1")

    @classmethod
    def from_settings(cls, settings: ConnectionSettings) -> ConnectionPolicy:
        """The settings' limits, `max_connections` lowered to what the process's file
        descriptor limit can hold (logged when it is)."""
        total = settings.max_connections
        fd_room = _fd_room()
        if fd_room is not None and total > fd_room:
            log.warning(
                "max_connections %d lowered to %d: the open-file limit (ulimit -n) leaves no "
                "room for more",
                total,
                fd_room,
            )
            total = fd_room
        return cls(
            header_timeout_s=settings.header_timeout_s,
            body_timeout_s=settings.body_timeout_s,
            max_connections=total,
            max_connections_per_client=min(settings.max_connections_per_client, total),
        )


def _fd_room() -> int | None:
    """Connections the soft RLIMIT_NOFILE leaves room for; None when unlimited."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return None
    return max(1, soft - RESERVED_FDS)
