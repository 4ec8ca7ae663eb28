"""Slow and hostile clients against a real `widebeam catalog serve` process over a real Redis
(reliability row 7): partial request heads, a connection flood from one address, an upload
without the key (refused from its headers, its body not read on), a stalled upload, and the log.
Each test talks from its own loopback addresses (127.0.N.x); every wait is bounded by a count
or a hang guard, never by how fast the machine is."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.services.catalog.service.conftest import LAYOUT_SPEC
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
from tests.support.redis_server import RedisServer
from tests.support.service_process import ServiceProcess, service_process

KEY = "catalog-slow-key-9034"
PER_CLIENT = 6
LOG_RATE_LIMIT = 5
UPLOAD = 64 << 20  # declared and pushed by the client without a key


@pytest.fixture(scope="module")
def catalog(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServiceProcess]:
    if not redis_server.running:
        redis_server.start()
    env = {
        "WIDEBEAM_CATALOG_API_KEY": KEY,
        **guard_env("WIDEBEAM_CATALOG_", PER_CLIENT, LOG_RATE_LIMIT),
    }
    args = ["catalog", "serve", "--port", "0", "--redis-url", redis_server.url,
            "--namespace", "slow-clients", "--sid-layout", LAYOUT_SPEC]  # fmt: skip
    log_path = tmp_path_factory.mktemp("catalog") / "catalog.log"
    with service_process(args, env, log_path) as proc:
        wait_served(proc.port)
        yield proc


def test_partial_heads_are_closed_and_new_clients_served(catalog: ServiceProcess) -> None:
    partial = [connect(catalog.port, f"127.0.1.{1 + i // PER_CLIENT}") for i in range(120)]
    for sock in partial:
        sock.sendall(b"POST /v1/catalogs/x/versions HTTP/1.1\r\nHost: test\r\n")
    statuses = closed_by_server(partial)
    for sock in partial:
        sock.close()
    assert statuses == [408] * len(partial)
    wait_served(catalog.port)


def test_connections_per_client_are_capped(catalog: ServiceProcess) -> None:
    check_per_client_cap(catalog.port, PER_CLIENT)


def test_an_upload_without_the_key_is_not_read(catalog: ServiceProcess) -> None:
    head = request_head(
        "POST",
        "/v1/catalogs/nokey/versions",
        {"Content-Type": "application/octet-stream", "Content-Length": str(UPLOAD)},
    )
    with connect(catalog.port, "127.0.3.1") as sock:
        sock.sendall(head)
        assert answer(sock) == 401  # from the headers alone: no body byte was sent
        # A client that pushes its body anyway is cut off after a little of it, instead of
        # the service reading (and dropping) all 64 MiB.
        let_in = send_counted(sock, UPLOAD)
    assert let_in < UPLOAD // 2, f"{let_in} of {UPLOAD} body bytes were taken in"
    assert httpx.get(f"http://127.0.0.1:{catalog.port}/v1/catalogs/nokey").status_code == 404


def test_a_stalled_upload_is_dropped_and_nothing_published(catalog: ServiceProcess) -> None:
    head = request_head(
        "POST",
        "/v1/catalogs/stalled/versions",
        {
            "Authorization": f"Bearer {KEY}",
            "Content-Type": "application/octet-stream",
            "Content-Length": "2000000",
        },
    )
    with connect(catalog.port, "127.0.4.1") as sock:
        sock.sendall(head + b'{"item_id": "a", "sid": [1, 2, 3]}\n' * 20_000)
        assert answer(sock) == 408
        read_to_close(sock)
    assert httpx.get(f"http://127.0.0.1:{catalog.port}/v1/catalogs/stalled").status_code == 404
    wait_served(catalog.port, "127.0.4.1")


def test_the_log_stays_bounded(catalog: ServiceProcess) -> None:
    lines_before = len(catalog.log_lines())
    send_bad_request_lines(catalog.port, PER_CLIENT, "127.0.5", 150)
    refused = [connect(catalog.port, "127.0.6.1") for _ in range(PER_CLIENT + 60)]
    assert set(closed_by_server(refused)) <= {429, None}
    for sock in refused:
        sock.close()
    wait_served(catalog.port)
    new_lines = catalog.log_lines()[lines_before:]
    assert len(new_lines) <= 3 * LOG_RATE_LIMIT + 5, "\n".join(new_lines[-40:])
