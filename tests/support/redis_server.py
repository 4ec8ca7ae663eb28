"""Throw-away ``redis-server`` for tests: free port, temp dir, no persistence."""

from __future__ import annotations

import atexit
import shutil
import socket
import subprocess
import time
from pathlib import Path

from tests.support.child_process import stop_child
from widebeam.services.started_in_with import StartedInWith


def find_redis_server() -> str | None:
    """Path of the redis-server binary, or None when it is not installed."""
    return shutil.which("redis-server") or (
        "/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else None
    )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ping(port: int, timeout: float = 0.5) -> bool:
    """True when a Redis on ``port`` answers PING (raw RESP, so no client library needed)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer(StartedInWith):
    """One redis-server process; :meth:`restart` keeps the port (the data is lost); `with
    RedisServer(dir) as server:` runs it for the block."""

    def __init__(self, workdir: Path, executable: str | None = None) -> None:
        exe = executable or find_redis_server()
        if exe is None:
            raise FileNotFoundError("redis-server is not installed")
        self.executable = exe
        self.workdir = Path(workdir)
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        atexit.register(self.stop)  # also when the session dies without running finalizers

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 10.0) -> RedisServer:
        """Start on the current port, or on a free one the first time (retrying port races)."""
        attempts = 1 if self.port else 3
        for attempt in range(attempts):
            port = self.port or free_port()
            if self._spawn(port, timeout):
                self.port = port
                return self
            if attempt == attempts - 1:
                log = (self.workdir / "redis.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"redis-server did not start on port {port}:\n{log}")

    def _spawn(self, port: int, timeout: float) -> bool:
        self.workdir.mkdir(parents=True, exist_ok=True)
        args = {
            "port": port,
            "bind": "127.0.0.1",
            "save": "",
            "appendonly": "no",
            "dir": self.workdir,
            "logfile": "redis.log",
            "daemonize": "no",
        }
        cmd = [self.executable]
        for key, value in args.items():
            cmd += [f"--{key}", str(value)]
        out = subprocess.DEVNULL
        self.proc = subprocess.Popen(cmd, cwd=self.workdir, stdout=out, stderr=out)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False  # exited: most likely the port was taken meanwhile
            if ping(port):
                return True
            time.sleep(0.02)
        self.stop()
        return False

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        stop_child(proc, grace_s=5)

    def restart(self) -> None:
        """Stop and start again on the same port; without persistence all data is gone."""
        self.stop()
        self.start()
