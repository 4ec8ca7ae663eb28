"""`widebeam up`: redis-server (unless --redis-url), catalog, decoder, gateway and one worker as
child processes on this machine; uploads the catalog; prints `gateway: http://HOST:PORT` once
everything is ready; stops all of them on Ctrl-C or SIGTERM (at once, also during start-up).

The launcher is their supervisor: a child that dies after start-up is restarted with back-off
(`restart_policy.py`), on the same port and with the same settings; a crash loop stops the
stack. Children die with the launcher, even when it is SIGKILLed. The redis-server it starts
requires a password generated per run, and the decoder a bearer token generated per run (unless
WIDEBEAM_DECODER_AUTH_TOKEN[_FILE] is set already) that the gateway and the worker send;
secrets reach the children through their environment (never their command lines, which `ps`
shows to every local user)."""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from widebeam.launcher.children import COLORS, Child, die_with_parent
from widebeam.launcher.readiness import (
    StartupError,
    StartupInterrupted,
    free_port,
    http_ok,
    line_seen,
    redis_ping,
    wait_until,
)
from widebeam.launcher.restart_policy import RestartPolicy, RestartState
from widebeam.launcher.widths import Widths, add_width_arguments
from widebeam.services.catalog.default_name import DEFAULT_CATALOG
from widebeam.services.decoder.config import DType
from widebeam.services.decoder.security.bearer_token import TOKEN_ENV, TOKEN_FILE_ENV

PY = [sys.executable, "-m", "widebeam"]
GRACE_S = 15.0
GATEWAY_LISTENING = "gateway listening on "
# Each service reads its Redis from its own settings prefix; the URL can hold a password.
REDIS_URL_ENV = (
    "WIDEBEAM_CATALOG_REDIS_URL",
    "WIDEBEAM_DECODER_REDIS_URL",
    "WIDEBEAM_GATEWAY_REDIS_URL",
    "WIDEBEAM_BATCH_REDIS_URL",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--model", required=True, help="HF model directory (with SID tokens)")
    add("--catalog", help="catalog file to upload (any format `widebeam catalog upload` takes)")
    add("--catalog-name", default=DEFAULT_CATALOG)
    add("--host", default="127.0.0.1", help="bind address of the gateway")
    add("--port", type=int, default=8000, help="gateway port (0: a free one, printed)")
    add("--device", default="cpu", choices=["cpu", "cuda"])
    add(
        "--dtype",
        choices=[d.value for d in DType],
        help="decoder dtype (default: float32 on cpu, bfloat16 on cuda)",
    )
    add("--catalog-port", type=int, help="catalog service port (default: a free one)")
    add("--decoder-port", type=int, help="decoder gRPC port (default: a free one)")
    add(
        "--redis-url",
        default=os.environ.get("WIDEBEAM_REDIS_URL"),
        help="use this Redis instead of starting a redis-server [WIDEBEAM_REDIS_URL]",
    )
    add(
        "--api-key",
        default=os.environ.get("WIDEBEAM_API_KEY"),
        help="require this Bearer key on the gateway and catalog writes [WIDEBEAM_API_KEY]",
    )
    add("--startup-timeout", type=float, default=600.0, help="seconds to wait for readiness")
    add(
        "--max-restarts",
        type=int,
        default=RestartPolicy.max_restarts,
        help="consecutive restarts of a crashed child before the stack stops (0: stop at once)",
    )
    add_width_arguments(parser)
    parser.set_defaults(handler=run)


class Stack:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.policy = RestartPolicy(max_restarts=args.max_restarts)
        self.children: list[Child] = []
        self.restarts: dict[str, RestartState] = {}
        self.stop_requested = threading.Event()
        self.workdir = Path(tempfile.mkdtemp(prefix="widebeam-up-"))

    def spawn(self, name: str, argv: list[str], env: dict[str, str], *markers: str) -> Child:
        child = Child(name, argv, env, color=COLORS[len(self.children) % len(COLORS)])
        for marker in markers:  # before the start: the line may come at once
            child.look_for(marker)
        self.children.append(child.start())
        self.restarts[name] = RestartState(self.policy)
        return child

    def wait(self, check: Callable[[], bool], what: str, timeout_s: float) -> None:
        wait_until(check, self.children, what, timeout_s, self.stop_requested)

    def start(self) -> str:
        args = self.args
        widths = Widths.from_args(args)
        env = (
            {"WIDEBEAM_CATALOG_API_KEY": args.api_key, "WIDEBEAM_GATEWAY_API_KEYS": args.api_key}
            if args.api_key
            else {}
        )
        redis_url = args.redis_url or self._start_redis()
        env |= dict.fromkeys(REDIS_URL_ENV, redis_url)
        if not (os.environ.get(TOKEN_ENV) or os.environ.get(TOKEN_FILE_ENV)):
            # The decoder and its clients (gateway, worker) share it; without one, a direct
            # gRPC call would skip the gateway's API keys and limits.
            env[TOKEN_ENV] = secrets.token_urlsafe(32)
        catalog_port = args.catalog_port or free_port()
        decoder = f"127.0.0.1:{args.decoder_port or free_port()}"
        catalog_url = f"http://127.0.0.1:{catalog_port}"
        dtype = args.dtype or (DType.BFLOAT16 if args.device == "cuda" else DType.FLOAT32)
        self.spawn("catalog", [*PY, "catalog", "serve", "--port", str(catalog_port),
                               "--model", args.model], env)  # fmt: skip
        self.spawn("decoder", [*PY, "decoder", "serve", "--model", args.model, "--device",
                               args.device, "--dtype", dtype, "--port",
                               decoder.rsplit(":", 1)[1],
                               *widths.decoder_flags()], env)  # fmt: skip
        self.wait(http_ok(f"{catalog_url}/readyz"), "the catalog service", 120)
        if args.catalog:
            self._upload(catalog_url, env)
        gateway = self.spawn("gateway", [*PY, "gateway", "serve", "--host", args.host, "--port",
                                         str(args.port), "--decoder", decoder,
                                         *widths.gateway_flags()],
                             env, GATEWAY_LISTENING)  # fmt: skip
        self.spawn("worker", [*PY, "worker", "--decoder", decoder], env | widths.worker_env())
        port = args.port or self._bound_port(gateway)
        host = "127.0.0.1" if args.host in ("0.0.0.0", "::") else args.host
        gateway_url = f"http://{host}:{port}"
        # With a catalog, ready means the decoder serves it; without, that the gateway is up.
        probe = "/readyz" if args.catalog else "/healthz"
        self.wait(http_ok(gateway_url + probe), "the gateway", args.startup_timeout)
        print(f"catalog service: {catalog_url}   decoder (gRPC): {decoder}", flush=True)
        return gateway_url

    def _bound_port(self, gateway: Child) -> int:
        """The port a `--port 0` gateway bound, read from its log line; restarts of the gateway
        reuse it, so its URL stays the same."""
        self.wait(line_seen(gateway, GATEWAY_LISTENING), "the gateway's port", 120)
        line = gateway.line_with(GATEWAY_LISTENING) or ""
        url = line.split(GATEWAY_LISTENING, 1)[1].split()[0]
        port = int(url.rsplit(":", 1)[1])
        gateway.argv[gateway.argv.index("--port") + 1] = str(port)
        return port

    def _start_redis(self) -> str:
        binary = shutil.which("redis-server")
        if binary is None:
            raise StartupError(
                "redis-server not found: install it (make install does) or pass --redis-url"
            )
        port = free_port()
        password = secrets.token_urlsafe(24)
        data = self.workdir / "redis"
        data.mkdir()
        # The password stays in a file only this user can read, off the command line; the
        # append-only file brings a restarted redis-server back with the stack's state.
        config = self.workdir / "redis.conf"
        config.touch(mode=0o600)
        config.write_text(
            f"port {port}\nbind 127.0.0.1\nrequirepass {password}\ndir {data}\n"
            'save ""\nappendonly yes\nappendfsync everysec\n'
        )
        self.spawn("redis", [binary, str(config)], {})
        url = f"redis://:{password}@127.0.0.1:{port}/0"
        self.wait(redis_ping(url), "redis-server", 30)
        return url

    def _upload(self, catalog_url: str, env: dict[str, str]) -> None:
        args = self.args
        argv = [*PY, "catalog", "upload", args.catalog, "--name", args.catalog_name,
                "--url", catalog_url, "--model", args.model, "--no-progress"]  # fmt: skip
        proc = subprocess.Popen(
            argv,
            env={**os.environ, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            preexec_fn=die_with_parent(),
        )
        deadline = time.monotonic() + args.startup_timeout
        while True:
            try:
                out, err = proc.communicate(timeout=0.25)
                break
            except subprocess.TimeoutExpired:
                if self.stop_requested.is_set() or time.monotonic() > deadline:
                    proc.kill()
                    proc.communicate()
                    if self.stop_requested.is_set():
                        raise StartupInterrupted("stopped during the catalog upload") from None
                    raise StartupError("the catalog upload timed out") from None
        if proc.returncode != 0:
            raise StartupError(f"catalog upload failed: {err.strip() or out}")
        try:
            result = json.loads(out)
            summary = (
                f"catalog {result['name']!r} version {result['version']} "
                f"({result['stats'].get('num_items', '?')} items) is current"
            )
        except (ValueError, KeyError, TypeError):
            summary = " ".join(out.split())
        print(f"  upload | {summary}", flush=True)

    def supervise(self) -> int:
        """Until a signal (exit 0) or a crash loop (exit 1): restart children that die."""
        while not self.stop_requested.wait(0.2):
            now = time.monotonic()
            for child in self.children:
                state = self.restarts[child.name]
                if state.restart_due(now):
                    print(f"widebeam up: restarting {child.name}", file=sys.stderr, flush=True)
                    child.start()
                    state.restarted()
                    continue
                code = child.exit_code
                if code is None or state.due_at is not None:
                    continue
                delay = state.crashed(now, ran_for_s=now - child.started_at)
                if delay is None:
                    print(
                        f"widebeam up: {child.name} exited with code {code} after "
                        f"{self.policy.max_restarts} restarts in a row; stopping the stack",
                        file=sys.stderr,
                        flush=True,
                    )
                    return 1
                print(
                    f"widebeam up: {child.name} exited with code {code}; restarting it in "
                    f"{delay:g} s (restart {state.consecutive} of at most "
                    f"{self.policy.max_restarts} in a row)",
                    file=sys.stderr,
                    flush=True,
                )
        return 0

    def stop(self) -> None:
        for child in reversed(self.children):  # gateway and worker first, redis last
            child.stop(GRACE_S)
        shutil.rmtree(self.workdir, ignore_errors=True)


def run(args: argparse.Namespace) -> int:
    stack = Stack(args)
    previous = {
        sig: signal.signal(sig, lambda *_: stack.stop_requested.set())
        for sig in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        gateway_url = stack.start()
        print(f"gateway: {gateway_url}", flush=True)
        return stack.supervise()
    except StartupInterrupted:
        return 0
    except StartupError as exc:
        print(f"widebeam up: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        stack.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
