"""`ConnectionCounts`: open connections per client address and in all, against their caps."""

from __future__ import annotations

from collections import Counter
from enum import Enum


class Refusal(Enum):
    """Why a new connection was not admitted."""

    CLIENT_FULL = "client_full"  # its address already holds max_connections_per_client
    SERVER_FULL = "server_full"  # the server already holds max_connections


class ConnectionCounts:
    """One per server; used from its event loop only (no lock)."""

    def __init__(self, max_total: int, max_per_client: int) -> None:
        self.max_total = max_total
        self.max_per_client = max_per_client
        self.total = 0
        self._per_client: Counter[str] = Counter()

    def admit(self, client: str) -> Refusal | None:
        """Take a slot for `client`, or say why there is none."""
        if self.total >= self.max_total:
            return Refusal.SERVER_FULL
        if self._per_client[client] >= self.max_per_client:
            return Refusal.CLIENT_FULL
        self.total += 1
        self._per_client[client] += 1
        return None

    def release(self, client: str) -> None:
        self.total -= 1
        self._per_client[client] -= 1
        if self._per_client[client] <= 0:
            del self._per_client[client]  # the map holds connected clients only

    def of(self, client: str) -> int:
        return self._per_client.get(client, 0)
