"""`widebeam up`: redis-server (unless --redis-url), catalog, decoder, gateway and one worker as
child processes on this machine, on fixed default ports (`ports.py`); uploads the catalog;
once everything is ready prints a table of every service's URL (`summary.py`) and then
`gateway: http://HOST:PORT`; stops all of them on Ctrl-C or SIGTERM (at once, also during
start-up). Its redis-server keeps its data under the state directory (`redis_state.py`), so
catalogs and batch jobs survive a restart of the stack, unless --no-persist.

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
from widebeam.launcher.gateway_options import GatewayOptions, add_gateway_arguments
from widebeam.launcher.ports import DEFAULT_PORTS, check_free
from widebeam.launcher.readiness import (
    StartupError,
    StartupInterrupted,
    free_port,
    http_ok,
    line_seen,
    redis_ping,
    wait_until,
)
from widebeam.launcher.redis_state import StateDirLock, default_state_dir, redis_config
from widebeam.launcher.restart_policy import RestartPolicy, RestartState
from widebeam.launcher.summary import StackUrls, persistence_note, summary_table
from widebeam.launcher.widths import Widths, add_width_arguments
from widebeam.services.catalog.default_name import DEFAULT_CATALOG
from widebeam.services.decoder.config import DType
from widebeam.services.decoder.security.bearer_token import TOKEN_ENV, TOKEN_FILE_ENV

PY = [sys.executable, "-m", "widebeam"]
GRACE_S = 15.0
GATEWAY_LISTENING = "gateway listening on "
DECODER_SERVING = "decoder serving on "  # logged once the model is loaded and Redis's catalogs read
# Each service reads its Redis from its own settings prefix; the URL can hold a password.
REDIS_URL_ENV = (
    "WIDEBEAM_CATALOG_REDIS_URL",
    "WIDEBEAM_DECODER_REDIS_URL",
    "WIDEBEAM_GATEWAY_REDIS_URL",
    "WIDEBEAM_BATCH_REDIS_URL",
)
# On a 2-core machine a second intra-op thread made the tiny model's beam search several times
# slower (each small op waits for whichever thread was descheduled); see the README.
DEFAULT_DECODER_THREADS = 1


class _DefaultsHelp(argparse.ArgumentDefaultsHelpFormatter):
    """`--help` shows every default, except None and False (the help says what no value or
    no flag means) and secrets (a key taken from the environment would be printed)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default in (None, False) or action.dest in ("api_key", "redis_url"):
            return action.help or ""
        return super()._get_help_string(action) or ""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = _DefaultsHelp
    add = parser.add_argument
    add("--model", required=True, help="HF model directory (with SID tokens)")
    add("--catalog", help="catalog file to upload (any format `widebeam catalog upload` takes)")
    add("--catalog-name", default=DEFAULT_CATALOG, help="name to upload --catalog as")
    add("--host", default="127.0.0.1", help="bind address of the gateway")
    add("--port", type=int, default=DEFAULT_PORTS.gateway,
        help="gateway port (0: a free one, printed)")  # fmt: skip
    add("--device", default="cpu", choices=["cpu", "cuda"], help="where the decoder runs")
    add(
        "--dtype",
        choices=[d.value for d in DType],
        help="decoder dtype (default: float32 on cpu, bfloat16 on cuda)",
    )
    add("--catalog-port", type=int, default=DEFAULT_PORTS.catalog,
        help="catalog service port, on 127.0.0.1 (0: a free one)")  # fmt: skip
    add("--decoder-port", type=int, default=DEFAULT_PORTS.decoder,
        help="decoder gRPC port, on 127.0.0.1 (0: a free one)")  # fmt: skip
    add("--redis-port", type=int, default=DEFAULT_PORTS.redis,
        help="port of the redis-server it starts, on 127.0.0.1 (0: a free one)")  # fmt: skip
    add("--state-dir", type=Path, default=default_state_dir(),
        help="where the redis-server keeps its data between runs [WIDEBEAM_STATE_DIR]")  # fmt: skip
    add("--no-persist", action="store_true",
        help="keep nothing between runs: Redis's data goes when the launcher stops")  # fmt: skip
    add("--decoder-threads", type=int, default=DEFAULT_DECODER_THREADS,
        help="torch threads of a CPU decoder (OMP_NUM_THREADS)")  # fmt: skip
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
    add_gateway_arguments(parser)
    parser.set_defaults(handler=run)


class Stack:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.policy = RestartPolicy(max_restarts=args.max_restarts)
        self.children: list[Child] = []
        self.restarts: dict[str, RestartState] = {}
        self.stop_requested = threading.Event()
        self.workdir = Path(tempfile.mkdtemp(prefix="widebeam-up-"))
        self.state_lock: StateDirLock | None = None
        self.redis_note = "given by --redis-url / WIDEBEAM_REDIS_URL"

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
        if args.decoder_threads < 1:
            raise StartupError(f"--decoder-threads must be >= 1, not {args.decoder_threads}")
        wanted = {
            "gateway": (args.host, args.port, "--port"),
            "catalog service": ("127.0.0.1", args.catalog_port, "--catalog-port"),
            "decoder": ("127.0.0.1", args.decoder_port, "--decoder-port"),
        }
        if not args.redis_url:
            wanted["redis"] = ("127.0.0.1", args.redis_port, "--redis-port")
        check_free(wanted)
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
        decoder_env = env | {"OMP_NUM_THREADS": str(args.decoder_threads)}
        decoder_child = self.spawn("decoder", [*PY, "decoder", "serve", "--model", args.model,
                                               "--device", args.device, "--dtype", dtype,
                                               "--port", decoder.rsplit(":", 1)[1],
                                               *widths.decoder_flags()],
                                   decoder_env, DECODER_SERVING)  # fmt: skip
        self.wait(http_ok(f"{catalog_url}/readyz"), "the catalog service", 120)
        if args.catalog:
            self._upload(catalog_url, env)
        gateway = self.spawn("gateway", [*PY, "gateway", "serve", "--host", args.host, "--port",
                                         str(args.port), "--decoder", decoder,
                                         *widths.gateway_flags(),
                                         *GatewayOptions.from_args(args).gateway_flags()],
                             env, GATEWAY_LISTENING)  # fmt: skip
        self.spawn("worker", [*PY, "worker", "--decoder", decoder], env | widths.worker_env())
        port = args.port or self._bound_port(gateway)
        host = "127.0.0.1" if args.host in ("0.0.0.0", "::") else args.host
        gateway_url = f"http://{host}:{port}"
        # With a catalog, ready means the decoder serves it; without, that the gateway is up.
        probe = "/readyz" if args.catalog else "/healthz"
        self.wait(http_ok(gateway_url + probe), "the gateway", args.startup_timeout)
        # Also without --catalog: the catalogs a persisted Redis holds are served once it is.
        self.wait(line_seen(decoder_child, DECODER_SERVING), "the decoder", args.startup_timeout)
        urls = StackUrls(gateway_url, catalog_url, decoder, redis_url, self.redis_note)
        print(f"widebeam up: ready\n{summary_table(urls)}", flush=True)
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
        port = self.args.redis_port or free_port()
        password = secrets.token_urlsafe(24)
        if self.args.no_persist:
            data = self.workdir / "redis"
            self.redis_note = persistence_note(None)
        else:
            self.state_lock = StateDirLock(self.args.state_dir)
            data = self.args.state_dir / "redis"
            self.redis_note = persistence_note(self.args.state_dir)
        data.mkdir(parents=True, exist_ok=True)
        # The password stays in a file only this user can read, off the command line (and out
        # of the state directory: it is new every run).
        config = self.workdir / "redis.conf"
        config.touch(mode=0o600)
        config.write_text(redis_config(port, password, data))
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
        if self.state_lock is not None:
            self.state_lock.release()
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
