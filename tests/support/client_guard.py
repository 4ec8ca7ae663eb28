"""What the slow-client tests of both HTTP services (gateway and catalog service) share: the
guard settings they start a service with, the wait until it serves an address again, and the
checks that behave the same on both (the per-client connection cap, a flood of bad request
lines). Every wait is bounded by a count or a hang guard, never by how fast the machine is."""

from __future__ import annotations

import time

from tests.support.raw_http import answer, connect, get, request_head


def guard_env(prefix: str, per_client: int, log_rate_limit: int) -> dict[str, str]:
    """`WIDEBEAM_<prefix>_*` guard settings for a test module: 2 s head and body deadlines,
    held connections kept, `per_client` connections per address, one log window for the
    whole module."""
    return {
        f"{prefix}HEADER_TIMEOUT_S": "2",
        f"{prefix}BODY_TIMEOUT_S": "2",
        f"{prefix}KEEP_ALIVE_TIMEOUT_S": "600",  # held connections stay for the test
        f"{prefix}MAX_CONNECTIONS_PER_CLIENT": str(per_client),
        f"{prefix}LOG_RATE_LIMIT": str(log_rate_limit),
        f"{prefix}LOG_RATE_INTERVAL_S": "36000",  # one window for the whole module
    }


def wait_served(port: int, source: str = "127.0.0.1") -> None:
    """/healthz answers 200 from `source` (the server may still be closing earlier ones)."""
    deadline = time.monotonic() + 120
    while True:
        try:
            if get(port, "/healthz", source) == 200:
                return
        except OSError:
            pass
        assert time.monotonic() < deadline, f"/healthz not served to {source}"
        time.sleep(0.1)


def check_per_client_cap(port: int, per_client: int) -> None:
    """From 127.0.2.1: `per_client` idle connections are held, one more is refused 429 at
    once; another address is still served, and a freed slot lets the first one in again."""
    held = [connect(port, "127.0.2.1") for _ in range(per_client)]
    for sock in held:  # served, then idle in keep-alive: each holds its slot
        sock.sendall(request_head("GET", "/healthz"))
        assert answer(sock) == 200
    with connect(port, "127.0.2.1") as excess:
        assert answer(excess) == 429  # refused at once, before it sends anything
    assert get(port, "/healthz", "127.0.2.2") == 200  # another client is served
    held.pop().close()
    wait_served(port, "127.0.2.1")  # a slot freed: served again
    for sock in held:
        sock.close()


def send_bad_request_lines(port: int, per_client: int, address_block: str, count: int) -> None:
    """`count` connections from `address_block`.x (`per_client` per address) each send a line
    that is not HTTP and get 400: without the log rate limit, one log line each."""
    for i in range(count):
        with connect(port, f"{address_block}.{1 + i // per_client}") as sock:
            sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
            assert answer(sock) == 400
