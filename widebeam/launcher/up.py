"""`widebeam up`: redis-server (unless --redis-url), catalog, decoder, gateway and one worker as
child processes on this machine; uploads the catalog; prints `gateway: http://HOST:PORT` once
everything is ready; stops all of them on Ctrl-C, SIGTERM, or when one dies."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading

from widebeam.launcher.children import COLORS, Child
from widebeam.launcher.readiness import StartupError, free_port, http_ok, redis_ping, wait_until

PY = [sys.executable, "-m", "widebeam"]
GRACE_S = 15.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--model", required=True, help="HF model directory (with SID tokens)")
    add("--catalog", help="catalog file to upload (any format `widebeam catalog upload` takes)")
    add("--catalog-name", default="default")
    add("--host", default="127.0.0.1", help="bind address of the gateway")
    add("--port", type=int, default=8000, help="gateway port")
    add("--device", default="cpu", choices=["cpu", "cuda"])
    add("--dtype", default=None, help="decoder dtype (default: float32 on cpu, bfloat16 on cuda)")
    add("--catalog-port", type=int, help="catalog service port (default: a free one)")
    add("--decoder-port", type=int, help="decoder gRPC port (default: a free one)")
    add("--redis-url", help="use this Redis instead of starting a redis-server")
    add(
        "--api-key",
        default=os.environ.get("WIDEBEAM_API_KEY"),
        help="require this Bearer key on the gateway and catalog writes [WIDEBEAM_API_KEY]",
    )
    add("--startup-timeout", type=float, default=600.0, help="seconds to wait for readiness")
    parser.set_defaults(handler=run)


class Stack:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.children: list[Child] = []
        self.stop_requested = threading.Event()

    def spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Child:
        color = COLORS[len(self.children) % len(COLORS)]
        child = Child(name, argv, env, color=color).start()
        self.children.append(child)
        return child

    def start(self) -> str:
        args = self.args
        key_env = (
            {"WIDEBEAM_CATALOG_API_KEY": args.api_key, "WIDEBEAM_GATEWAY_API_KEYS": args.api_key}
            if args.api_key
            else {}
        )
        redis_url = args.redis_url or self._start_redis()
        catalog_port = args.catalog_port or free_port()
        decoder_port = args.decoder_port or free_port()
        catalog_url = f"http://127.0.0.1:{catalog_port}"
        catalog = self.spawn(
            "catalog",
            [
                *PY,
                "catalog",
                "serve",
                "--port",
                str(catalog_port),
                "--redis-url",
                redis_url,
                "--model",
                args.model,
            ],
            key_env,
        )
        dtype = args.dtype or ("bfloat16" if args.device == "cuda" else "float32")
        self.spawn(
            "decoder",
            [
                *PY,
                "decoder",
                "serve",
                "--model",
                args.model,
                "--device",
                args.device,
                "--dtype",
                dtype,
                "--port",
                str(decoder_port),
                "--redis-url",
                redis_url,
            ],
        )
        wait_until(http_ok(f"{catalog_url}/readyz"), self.children, "the catalog service", 120)
        if args.catalog:
            self._upload(catalog_url, key_env)
        decoder = f"127.0.0.1:{decoder_port}"
        self.spawn(
            "gateway",
            [
                *PY,
                "gateway",
                "serve",
                "--host",
                args.host,
                "--port",
                str(args.port),
                "--decoder",
                decoder,
                "--redis-url",
                redis_url,
            ],
            key_env,
        )
        self.spawn("worker", [*PY, "worker", "--redis-url", redis_url, "--decoder", decoder])
        host = "127.0.0.1" if args.host in ("0.0.0.0", "::") else args.host
        gateway_url = f"http://{host}:{args.port}"
        # With a catalog, ready means the decoder serves it; without, that the gateway is up.
        probe = "/readyz" if args.catalog else "/healthz"
        wait_until(http_ok(gateway_url + probe), self.children, "the gateway", args.startup_timeout)
        del catalog
        return gateway_url

    def _start_redis(self) -> str:
        binary = shutil.which("redis-server")
        if binary is None:
            raise StartupError(
                "redis-server not found: install it (make install does) or pass --redis-url"
            )
        port = free_port()
        workdir = tempfile.mkdtemp(prefix="widebeam-redis-")
        child = self.spawn(
            "redis",
            [
                binary,
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                workdir,
            ],
        )
        wait_until(redis_ping("127.0.0.1", port), [child], "redis-server", 30)
        return f"redis://127.0.0.1:{port}/0"

    def _upload(self, catalog_url: str, key_env: dict[str, str]) -> None:
        args = self.args
        argv = [
            *PY,
            "catalog",
            "upload",
            args.catalog,
            "--name",
            args.catalog_name,
            "--url",
            catalog_url,
            "--model",
            args.model,
            "--no-progress",
        ]
        done = subprocess.run(
            argv,
            env={**os.environ, **key_env},
            capture_output=True,
            text=True,
            timeout=args.startup_timeout,
        )
        if done.returncode != 0:
            raise StartupError(f"catalog upload failed: {done.stderr.strip() or done.stdout}")
        try:
            result = json.loads(done.stdout)
            summary = (
                f"catalog {result['name']!r} version {result['version']} "
                f"({result['stats'].get('num_items', '?')} items) is current"
            )
        except (ValueError, KeyError, TypeError):
            summary = " ".join(done.stdout.split())
        print(f"  upload | {summary}", flush=True)

    def watch(self) -> int:
        """Block until a signal (exit 0) or a child's death (exit 1)."""
        while not self.stop_requested.wait(0.2):
            for child in self.children:
                if child.exit_code is not None:
                    print(
                        f"widebeam up: {child.name} exited with code {child.exit_code}; "
                        "stopping the stack",
                        file=sys.stderr,
                        flush=True,
                    )
                    return 1
        return 0

    def stop(self) -> None:
        for child in reversed(self.children):  # gateway and worker first, redis last
            child.stop(GRACE_S)


def run(args: argparse.Namespace) -> int:
    stack = Stack(args)
    previous = {
        sig: signal.signal(sig, lambda *_: stack.stop_requested.set())
        for sig in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        gateway_url = stack.start()
        print(f"gateway: {gateway_url}", flush=True)
        return stack.watch()
    except StartupError as exc:
        print(f"widebeam up: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        stack.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
