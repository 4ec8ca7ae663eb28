"""The Compose stack of docker-compose.yml + deploy/compose.cpu.yml, run for real by the
`docker`-marked tests: images built by deploy/offline/build.sh, one Compose project of its own,
ports published on 127.0.0.1 only, everything removed again (`down -v`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.deploy.helpers import ROOT

PROJECT = "widebeam-compose-test"
BUILD_SCRIPT = ROOT / "deploy" / "offline" / "build.sh"


def docker_answers() -> str | None:
    """None when a Docker daemon and Compose v2 answer, else why not."""
    if shutil.which("docker") is None:
        return "no docker CLI"
    for args in (
        ["docker", "info", "--format", "{{.ServerVersion}}"],
        ["docker", "compose", "version"],
    ):
        try:
            proc = subprocess.run(args, capture_output=True, text=True, timeout=20)
        except subprocess.TimeoutExpired:
            return f"`{' '.join(args)}` did not answer"
        if proc.returncode != 0:
            return f"`{' '.join(args)}` failed: {proc.stderr.strip()[:200]}"
    return None


def docker(*args: str, timeout: float = 120, check: bool = True) -> str:
    proc = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)}: {proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return proc.stdout


def build_images() -> dict[str, str]:
    """deploy/offline/build.sh's settings (IMAGE, PYTHON_IMAGE, REDIS_IMAGE, TORCH_INDEX_URL)."""
    proc = subprocess.run([str(BUILD_SCRIPT)], capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)


@dataclass
class ComposeStack:
    """One `docker compose` project; `env` fills the Compose files' ${...}."""

    files: list[Path]
    env: dict[str, str]

    def compose(self, *args: str, timeout: float = 300, check: bool = True) -> str:
        command = ["docker", "compose", "-p", PROJECT]
        for path in self.files:
            command += ["-f", str(path)]
        proc = subprocess.run(
            [*command, *args],
            cwd=ROOT,
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"docker compose {' '.join(args)}: {proc.stdout[-3000:]}{proc.stderr[-3000:]}"
            )
        return proc.stdout

    def container(self, service: str) -> str:
        ids = self.compose("ps", "-q", service).split()
        assert len(ids) == 1, f"{service}: containers {ids}"
        return ids[0]

    def state(self, service: str) -> dict:
        return json.loads(docker("inspect", "--format", "{{json .State}}", self.container(service)))

    def restarts(self, service: str) -> int:
        return int(docker("inspect", "--format", "{{.RestartCount}}", self.container(service)))

    def crash(self, service: str) -> None:
        """SIGKILL to the container's PID 1 from the host: a crash, which the restart policy
        answers. (`docker kill` counts as a manual stop, which Docker never restarts.)"""
        pid = int(self.state(service)["Pid"])
        assert pid > 1, f"{service} is not running"
        os.kill(pid, 9)

    def wait_healthy(self, service: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            state = self.state(service)
            if state.get("Running") and state.get("Health", {}).get("Status") == "healthy":
                return
            time.sleep(1)
        logs = self.compose("logs", "--tail", "40", service, check=False)
        raise AssertionError(f"{service} not healthy after {timeout_s} s: {state}\n{logs}")

    def down(self) -> None:
        self.compose("down", "-v", "--remove-orphans", "--timeout", "20", timeout=600)

    def leftovers(self) -> list[str]:
        """Containers, volumes and networks of the project that still exist."""
        label = f"label=com.docker.compose.project={PROJECT}"
        found = docker("ps", "-a", "-q", "--filter", label).split()
        found += docker("volume", "ls", "-q", "--filter", label).split()
        found += docker("network", "ls", "-q", "--filter", label).split()
        return found


def wait_http(url: str, timeout_s: float, status: int = 200) -> httpx.Response:
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        try:
            reply = httpx.get(url, timeout=5)
            if reply.status_code == status:
                return reply
            last = (reply.status_code, reply.text[:300])
        except httpx.HTTPError as exc:
            last = exc
        time.sleep(1)
    raise AssertionError(f"{url}: no {status} within {timeout_s} s (last: {last!r})")
