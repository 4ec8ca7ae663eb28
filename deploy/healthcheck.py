#!/usr/bin/env python3
"""Container health probe for every widebeam service (installed as `widebeam-healthcheck`).

    widebeam-healthcheck [auto|gateway|catalog|decoder|worker] [--ready] [--timeout S]

- gateway, catalog: `GET /healthz` (`/readyz` with `--ready`) on the service's own port;
- decoder: the standard gRPC health service (`grpc.health.v1`), SERVING or not; over TLS
  when `WIDEBEAM_DECODER_CLIENT_TLS_CA_FILE` is set, with the client certificate of
  `..._CLIENT_TLS_CERT_FILE` / `..._KEY_FILE` and the name `..._CLIENT_TLS_SERVER_NAME`, as
  every decoder client (health needs no token);
- worker: the Celery broker (Redis) answers PING — a worker is useless without it, and
  probing the worker itself would fail while a solo-pool worker runs a chunk;
- auto (the default, used by the image's HEALTHCHECK): the service is read from the command
  line of PID 1 (`tini -- widebeam gateway serve` → gateway).

Host and port come from the same `WIDEBEAM_<SERVICE>_*` variables the service reads, so a
probe follows a changed port. A wildcard bind address (0.0.0.0, ::) is probed on loopback.
Exit code 0 = healthy, 1 = unhealthy (the reason goes to stderr), 2 = usage error.
This file lives in deploy/ (not in the package) and is copied into the images.
"""

from __future__ import annotations

import argparse
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported on use: the HTTP probes need no gRPC
    import grpc

SERVICES = ("gateway", "catalog", "decoder", "worker")
_DEFAULT_PORTS = {"gateway": 8000, "catalog": 8300, "decoder": 50051}
_WILDCARDS = {"", "0.0.0.0", "::", "[::]"}


def _address(service: str) -> tuple[str, int]:
    prefix = f"WIDEBEAM_{service.upper()}_"
    host = os.environ.get(prefix + "HOST", "127.0.0.1").strip()
    if host in _WILDCARDS:
        host = "127.0.0.1"
    port = int(os.environ.get(prefix + "PORT") or _DEFAULT_PORTS[service])
    return host, port


def _host_for_url(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def check_http(service: str, *, ready: bool, timeout: float) -> str | None:
    """None when the service answers 200 on its health route, else the reason."""
    host, port = _address(service)
    url = f"http://{_host_for_url(host)}:{port}/{'readyz' if ready else 'healthz'}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            if response.status == 200:
                return None
            return f"{url} answered {response.status}"
    except urllib.error.HTTPError as exc:
        return f"{url} answered {exc.code}"
    except OSError as exc:
        return f"{url}: {exc}"


def check_decoder(*, ready: bool, timeout: float) -> str | None:
    """None when the decoder's gRPC health service reports SERVING.

    `--ready` asks about the Decoder service itself; the default asks about the server
    (service ""). Both flip together today, NOT_SERVING while the model loads."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    host, port = _address("decoder")
    target = f"{_host_for_url(host)}:{port}"
    service = "widebeam.decoder.v1.Decoder" if ready else ""
    try:
        channel = _decoder_channel(target)
    except OSError as exc:
        return f"{target}: a TLS file cannot be read: {exc}"
    with channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        except grpc.RpcError as exc:
            return f"{target}: {exc.code().name} {exc.details() or ''}".rstrip()
    if reply.status != health_pb2.HealthCheckResponse.SERVING:
        name = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
        return f"{target}: {name}"
    return None


def _decoder_channel(target: str) -> grpc.Channel:
    """Plaintext, or TLS from the decoder clients' WIDEBEAM_DECODER_CLIENT_TLS_* variables."""
    import grpc

    def variable(name: str) -> str | None:
        return os.environ.get(f"WIDEBEAM_DECODER_CLIENT_TLS_{name}") or None

    ca = variable("CA_FILE")
    if ca is None:
        return grpc.insecure_channel(target)
    cert, key = variable("CERT_FILE"), variable("KEY_FILE")
    credentials = grpc.ssl_channel_credentials(
        root_certificates=Path(ca).read_bytes(),
        private_key=Path(key).read_bytes() if cert and key else None,
        certificate_chain=Path(cert).read_bytes() if cert and key else None,
    )
    name = variable("SERVER_NAME")
    options = [("grpc.ssl_target_name_override", name)] if name else []
    return grpc.secure_channel(target, credentials, options)


def check_worker(*, timeout: float) -> str | None:
    """None when the worker's broker (WIDEBEAM_BATCH_REDIS_URL) answers PING."""
    import redis

    url = os.environ.get("WIDEBEAM_BATCH_REDIS_URL", "redis://127.0.0.1:6379/0")
    client = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
    try:
        client.ping()
    except Exception as exc:  # any failure is "unhealthy", never a traceback
        return f"broker: {type(exc).__name__}: {exc}"
    finally:
        client.close()
    return None


def detect_service(cmdline: list[str]) -> str | None:
    """The service a `widebeam ...` command line runs: `tini -- widebeam gateway serve`,
    `/opt/venv/bin/widebeam worker`, `python -m widebeam decoder serve`."""
    words = [Path(word).name for word in cmdline]
    if "widebeam" not in words:
        return None
    after = words[words.index("widebeam") + 1 :]
    return next((word for word in after if word in SERVICES), None)


def _pid1_cmdline() -> list[str]:
    raw = Path("/proc/1/cmdline").read_bytes()
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def check(service: str, *, ready: bool = False, timeout: float = 3.0) -> str | None:
    if service in ("gateway", "catalog"):
        return check_http(service, ready=ready, timeout=timeout)
    if service == "decoder":
        return check_decoder(ready=ready, timeout=timeout)
    if service == "worker":
        return check_worker(timeout=timeout)
    raise ValueError(f"unknown service {service!r}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="widebeam-healthcheck", description="health probe of a widebeam container"
    )
    parser.add_argument("service", nargs="?", default="auto", choices=("auto", *SERVICES))
    parser.add_argument("--ready", action="store_true", help="readiness instead of liveness")
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds (default 3)")
    args = parser.parse_args(argv)
    service = args.service
    if service == "auto":
        try:
            service = detect_service(_pid1_cmdline())
        except OSError as exc:
            print(f"cannot read PID 1's command line: {exc}", file=sys.stderr)
            return 2
        if service is None:
            names = "|".join(SERVICES)
            print(f"PID 1 runs no widebeam service; name one: {names}", file=sys.stderr)
            return 2
    problem = check(service, ready=args.ready, timeout=args.timeout)
    if problem is not None:
        print(f"{service} unhealthy: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
