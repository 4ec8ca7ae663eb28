"""Slow and hostile clients against a real `widebeam gateway serve` process (reliability row 7):
partial request heads, connection floods from one address, stalled bodies, bodies without a
key, and the log they would grow, on each of the gateway's event loops. Each test talks from
its own loopback addresses (127.0.N.x), so the per-client cap of one never sees another's
connections. Every wait is bounded by a count or a hang guard, never by how fast the machine
is."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.client_guard import (
    check_per_client_cap,
    guard_env,
    send_bad_request_lines,
    wait_served,
)
from tests.support.raw_http import (
    answer,
    closed_by_server,
    connect,
    read_to_close,
    request_head,
    send_counted,
)
from tests.support.redis_server import free_port
from tests.support.service_process import ServiceProcess, service_process

KEY = "slow-client-key-5521"
PER_CLIENT = 8
OPEN_FILES = 512  # the guard keeps max_connections below this, less its reserve
LOG_RATE_LIMIT = 5
BODY = 3_900_000  # under the gateway's 4 MiB body limit


@pytest.fixture(scope="module", params=["asyncio", "uvloop"])
def gateway(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServiceProcess]:
    env = {
        "WIDEBEAM_GATEWAY_API_KEYS": KEY,
        "WIDEBEAM_GATEWAY_EVENT_LOOP": request.param,
        **guard_env("WIDEBEAM_GATEWAY_", PER_CLIENT, LOG_RATE_LIMIT),
    }
    args = ["gateway", "serve", "--port", "0", "--decoder", f"127.0.0.1:{free_port()}"]
    log_path = tmp_path_factory.mktemp("gateway") / "gateway.log"
    with service_process(args, env, log_path, max_open_files=OPEN_FILES) as proc:
        wait_served(proc.port)
        yield proc


def test_the_process_runs_the_event_loop_set(
    gateway: ServiceProcess, request: pytest.FixtureRequest
) -> None:
    with open(f"/proc/{gateway.proc.pid}/maps") as maps:
        loaded = "uvloop" if "/uvloop/" in maps.read() else "asyncio"
    assert loaded == request.node.callspec.params["gateway"]


def test_partial_heads_are_closed_and_new_clients_served(gateway: ServiceProcess) -> None:
    # More connections than the process has file descriptors, each stopping mid-head: without
    # a head deadline they are held for ever and the server can accept no one else.
    partial = [connect(gateway.port, f"127.0.1.{1 + i // 6}") for i in range(OPEN_FILES + 100)]
    for sock in partial:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: test\r\nX-Slow: ")
    statuses = closed_by_server(partial)
    for sock in partial:
        sock.close()
    assert set(statuses) <= {408, 503, None}, statuses
    assert statuses.count(408) >= PER_CLIENT  # admitted ones timed out; the excess got 503
    assert statuses.count(503) >= 1  # more than the descriptors allow: refused, not accepted
    wait_served(gateway.port)
    wait_served(gateway.port, "127.0.1.1")  # an address of the flood is served again too


def test_connections_per_client_are_capped(gateway: ServiceProcess) -> None:
    check_per_client_cap(gateway.port, PER_CLIENT)


def test_a_stalled_body_is_dropped(gateway: ServiceProcess) -> None:
    with connect(gateway.port, "127.0.3.1") as sock:
        headers = {"Authorization": f"Bearer {KEY}", "Content-Length": str(BODY)}
        sock.sendall(request_head("POST", "/v1/recommend", headers) + b"x" * (BODY // 2))
        assert answer(sock) == 408
        read_to_close(sock)  # and closed: what the gateway had read of the body is dropped
    wait_served(gateway.port, "127.0.3.1")


def test_a_body_without_a_key_is_not_read(gateway: ServiceProcess) -> None:
    # The 401 comes from the headers alone: the body is never sent here.
    head = request_head("POST", "/v1/recommend", {"Content-Length": str(BODY)})
    waiting = [connect(gateway.port, f"127.0.4.{1 + i // PER_CLIENT}") for i in range(40)]
    for sock in waiting:
        sock.sendall(head)
    assert [answer(sock) for sock in waiting] == [401] * len(waiting)
    for sock in waiting:
        sock.close()
    # Bodies sent anyway are not buffered: each stops being read after a little, so 40 nearly
    # whole 3.9 MB bodies, held open, do not pin 150 MB of the gateway's memory.
    before = gateway.rss_bytes()
    pushing = [connect(gateway.port, f"127.0.5.{1 + i // PER_CLIENT}") for i in range(40)]
    for sock in pushing:
        sock.sendall(head)
        send_counted(sock, BODY - 1000)
    grown = gateway.rss_bytes() - before
    for sock in pushing:
        sock.close()
    assert grown < 40 << 20, f"RSS grew {grown / 2**20:.0f} MiB"


def test_the_log_stays_bounded(gateway: ServiceProcess) -> None:
    # Each bad connection below logs one line without the limit: far more than the window lets
    # through (LOG_RATE_LIMIT per kind of line: bad request, timed-out head, refused).
    lines_before = len(gateway.log_lines())
    send_bad_request_lines(gateway.port, PER_CLIENT, "127.0.6", 150)
    partial = [connect(gateway.port, f"127.0.7.{1 + i // PER_CLIENT}") for i in range(80)]
    for sock in partial:
        sock.sendall(b"GET / HTTP/1.1\r\n")
    refused = [connect(gateway.port, "127.0.8.1") for _ in range(PER_CLIENT + 80)]
    assert set(closed_by_server(partial + refused)) <= {408, 429, None}
    for sock in partial + refused:
        sock.close()
    wait_served(gateway.port)
    new_lines = gateway.log_lines()[lines_before:]
    assert len(new_lines) <= 3 * LOG_RATE_LIMIT + 5, "\n".join(new_lines[-40:])
