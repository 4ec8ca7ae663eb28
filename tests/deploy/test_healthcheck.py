"""deploy/healthcheck.py (the images' `widebeam-healthcheck`) against real HTTP, gRPC health
and Redis servers on loopback."""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Iterator
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType

import pytest

from tests.deploy.helpers import DEPLOY
from tests.support.tls_certs import SERVER_NAME, make_test_certs


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("widebeam_healthcheck", DEPLOY / "healthcheck.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


probe = _load()


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response({"/healthz": 200, "/readyz": 503}.get(self.path, 404))
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def http_port() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(
    ("cmdline", "service"),
    [
        (["/usr/bin/tini", "--", "widebeam", "gateway", "serve"], "gateway"),
        (["/opt/venv/bin/python", "/opt/venv/bin/widebeam", "decoder", "serve"], "decoder"),
        (["python", "-m", "widebeam", "catalog", "serve", "--port", "8300"], "catalog"),
        (["tini", "--", "widebeam", "worker", "--concurrency", "2"], "worker"),
        (["/sbin/docker-init", "--", "widebeam", "worker"], "worker"),
        (["redis-server", "*:6379"], None),
        (["widebeam", "--help"], None),
    ],
)
def test_detect_service(cmdline: list[str], service: str | None) -> None:
    assert probe.detect_service(cmdline) == service


@pytest.mark.parametrize("service", ["gateway", "catalog"])
def test_http_liveness_and_readiness(
    service: str, http_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix = f"WIDEBEAM_{service.upper()}_"
    monkeypatch.setenv(prefix + "HOST", "0.0.0.0")  # a wildcard bind is probed on loopback
    monkeypatch.setenv(prefix + "PORT", str(http_port))
    assert probe.main([service]) == 0
    assert probe.main([service, "--ready"]) == 1  # /readyz answers 503
    monkeypatch.setenv(prefix + "PORT", str(_free_port()))
    assert probe.main([service, "--timeout", "1"]) == 1


def test_auto_reads_the_service_from_pid_1(http_port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WIDEBEAM_GATEWAY_PORT", str(http_port))
    monkeypatch.setattr(probe, "_pid1_cmdline", lambda: ["tini", "--", "widebeam", "gateway"])
    assert probe.main([]) == 0
    monkeypatch.setattr(probe, "_pid1_cmdline", lambda: ["sleep", "infinity"])
    assert probe.main(["auto"]) == 2


def test_grpc_health(monkeypatch: pytest.MonkeyPatch) -> None:
    import grpc
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc

    servicer = health.HealthServicer()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        monkeypatch.setenv("WIDEBEAM_DECODER_PORT", str(port))
        status = health_pb2.HealthCheckResponse
        servicer.set("", status.NOT_SERVING)  # the model is loading
        servicer.set("widebeam.decoder.v1.Decoder", status.NOT_SERVING)
        assert probe.main(["decoder"]) == 1
        servicer.set("", status.SERVING)
        servicer.set("widebeam.decoder.v1.Decoder", status.SERVING)
        assert probe.main(["decoder"]) == 0
        assert probe.main(["decoder", "--ready"]) == 0
    finally:
        server.stop(None)
    monkeypatch.setenv("WIDEBEAM_DECODER_PORT", str(_free_port()))
    assert probe.main(["decoder", "--timeout", "1"]) == 1


def test_worker_probe_pings_the_broker(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WIDEBEAM_BATCH_REDIS_URL", redis_url)
    assert probe.main(["worker"]) == 0


def test_worker_probe_fails_without_a_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    # The compose URL shape with an empty password.
    monkeypatch.setenv("WIDEBEAM_BATCH_REDIS_URL", f"redis://:@127.0.0.1:{_free_port()}/0")
    assert probe.main(["worker", "--timeout", "1"]) == 1


def test_grpc_health_over_mutual_tls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import grpc
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc

    certs = make_test_certs(tmp_path / "tls")
    servicer = health.HealthServicer()
    servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    credentials = grpc.ssl_server_credentials(
        [(certs.server_key.read_bytes(), certs.server_cert.read_bytes())],
        root_certificates=certs.ca.read_bytes(),
        require_client_auth=True,
    )
    port = server.add_secure_port("127.0.0.1:0", credentials)
    server.start()
    try:
        monkeypatch.setenv("WIDEBEAM_DECODER_PORT", str(port))
        assert probe.main(["decoder", "--timeout", "2"]) == 1  # plaintext: no handshake
        monkeypatch.setenv("WIDEBEAM_DECODER_CLIENT_TLS_CA_FILE", str(certs.ca))
        monkeypatch.setenv("WIDEBEAM_DECODER_CLIENT_TLS_SERVER_NAME", SERVER_NAME)
        assert probe.main(["decoder", "--timeout", "2"]) == 1  # no client certificate
        monkeypatch.setenv("WIDEBEAM_DECODER_CLIENT_TLS_CERT_FILE", str(certs.client_cert))
        monkeypatch.setenv("WIDEBEAM_DECODER_CLIENT_TLS_KEY_FILE", str(certs.client_key))
        assert probe.main(["decoder"]) == 0
        monkeypatch.setenv("WIDEBEAM_DECODER_CLIENT_TLS_CA_FILE", str(tmp_path / "missing.crt"))
        assert probe.main(["decoder"]) == 1  # a reason, not a traceback
    finally:
        server.stop(None)
