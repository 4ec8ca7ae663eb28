"""`widebeam up` end to end: real child processes, a recommendation over HTTP, clean stops, a
supervisor that restarts what dies, children that never outlive the launcher, a Redis that
requires the password only the children get, a decoder that requires the token only they get."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import httpx
import pytest
import redis
from google.protobuf import empty_pb2

from tests.services.decoder.conftest import SidModel
from tests.support.redis_server import find_redis_server, free_port
from tests.widebeam.stack import gateway_url, launch, start_stack, stop_stack, summary_urls
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2_grpc as pb_grpc

pytestmark = pytest.mark.skipif(find_redis_server() is None, reason="needs redis-server")

SERVICES = ("redis", "catalog", "decoder", "gateway", "worker")
LIMIT_S = 300  # hang guards: the verdicts wait for events, not for a number of seconds


def _start(sid_model: SidModel, port: int, tmp_path: Path, *extra: str):
    return start_stack(sid_model.model_dir, sid_model.catalog_path, port, tmp_path, *extra)


def _children_of(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


def _cmdline(pid: int) -> bytes:
    return Path(f"/proc/{pid}/cmdline").read_bytes()


def _child(parent: int, needle: bytes) -> int:
    found = [pid for pid in _children_of(parent) if needle in _cmdline(pid)]
    assert len(found) == 1, (needle, found)
    return found[0]


def _replaced(parent: int, needle: bytes, old: int) -> bool:
    """Whether one child of `parent` other than `old` runs `needle`."""
    try:
        return _child(parent, needle) != old
    except (AssertionError, FileNotFoundError):  # none yet, or one that just exited
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead: only its parent has not reaped it yet.
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"


def _wait(condition: Callable[[], bool], what: str, limit_s: float = LIMIT_S) -> None:
    deadline = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _recommend(url: str, sid_model: SidModel) -> httpx.Response:
    items = [item for item, _ in sid_model.catalog[:3]]
    body = {"history": items, "n": 4, "beam_width": 8}
    return httpx.post(f"{url}/v1/recommend", timeout=60, json=body)


class SharedStack:
    """One `widebeam up` for the tests that only look at a running stack: each start costs five
    processes importing their libraries (13-20 s on two busy cores). `running()` starts it when
    none runs (first use, or a test before stopped it), so the tests pass in any order alone."""

    def __init__(self, sid_model: SidModel, root: Path) -> None:
        self.sid_model, self.root, self.starts = sid_model, root, 0
        self.stack: tuple[subprocess.Popen, Path, int, Path] | None = None

    def running(self) -> tuple[subprocess.Popen, Path, int, Path]:
        """(launcher, its log, the gateway's port, its tmp dir) of a running stack."""
        if self.stack is None or self.stack[0].poll() is not None:
            self.starts += 1
            tmp = self.root / f"stack{self.starts}"
            tmp.mkdir()
            port = free_port()
            proc, log = _start(self.sid_model, port, tmp)
            self.stack = (proc, log, port, tmp)
        return self.stack

    def close(self) -> None:
        # A stack no test stopped (a test run alone, e.g. the restart test) must stop as
        # cleanly as the stop test demands: a restarted child does not spoil the exit code.
        if self.stack is not None and self.stack[0].poll() is None:
            proc, log = self.stack[0], self.stack[1]
            assert stop_stack(proc) == 0, log.read_text()[-3000:]


@pytest.fixture(scope="module")
def shared(sid_model: SidModel, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedStack]:
    holder = SharedStack(sid_model, tmp_path_factory.mktemp("up"))
    yield holder
    holder.close()


def _environ(pid: int) -> dict[bytes, bytes]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(entry.split(b"=", 1) for entry in raw.split(b"\0") if b"=" in entry)


def _decoder_info_code(address: str, token: str | None) -> grpc.StatusCode:
    metadata = (("authorization", f"Bearer {token}"),) if token else ()
    with grpc.insecure_channel(address) as channel:
        try:
            pb_grpc.DecoderStub(channel).GetInfo(empty_pb2.Empty(), metadata=metadata, timeout=60)
        except grpc.RpcError as exc:
            return exc.code()
    return grpc.StatusCode.OK


def test_up_redis_password_and_decoder_token_are_required_and_on_no_command_line(
    sid_model: SidModel, shared: SharedStack
) -> None:
    # Looks only: the stack keeps running for the next test, which stops it (and says how).
    proc, log, port, _ = shared.running()
    gateway = _child(proc.pid, b"widebeam\0gateway\0serve")
    environ = _environ(gateway)
    url = environ[b"WIDEBEAM_GATEWAY_REDIS_URL"].decode()
    password = redis.Redis.from_url(url).connection_pool.connection_kwargs["password"]
    assert password and len(password) >= 24
    redis_port = redis.Redis.from_url(url).connection_pool.connection_kwargs["port"]
    anonymous = redis.Redis(port=redis_port, socket_timeout=10)
    with anonymous, pytest.raises(redis.AuthenticationError):
        anonymous.set("widebeam:catalog:default:current", "forged")
    with redis.Redis.from_url(url, socket_timeout=10) as member:
        assert member.ping()
    # The decoder requires the token generated for this run; gateway and worker have it.
    token = environ[b"WIDEBEAM_DECODER_AUTH_TOKEN"].decode()
    assert len(token) >= 32
    worker = _child(proc.pid, b"widebeam\0worker")
    decoder = _child(proc.pid, b"widebeam\0decoder\0serve")
    for pid in (worker, decoder):
        assert _environ(pid)[b"WIDEBEAM_DECODER_AUTH_TOKEN"].decode() == token
    assert _environ(decoder)[b"OMP_NUM_THREADS"] == b"1"  # --decoder-threads' default
    address = summary_urls(log)["decoder (gRPC)"]
    assert _decoder_info_code(address, None) == grpc.StatusCode.UNAUTHENTICATED
    assert _decoder_info_code(address, "not-the-token-0123456789") == (
        grpc.StatusCode.UNAUTHENTICATED
    )
    assert _decoder_info_code(address, token) == grpc.StatusCode.OK
    base = f"http://127.0.0.1:{port}"
    assert _recommend(base, sid_model).status_code == 200
    rows = [{"history": [item], "n": 2} for item, _ in sid_model.catalog[:2]]
    job = httpx.post(f"{base}/v1/batch-jobs", json={"requests": rows}, timeout=60).json()
    status_url = f"{base}/v1/batch-jobs/{job['id']}"

    def job_status() -> str:
        return str(httpx.get(status_url, timeout=60).json()["status"])

    _wait(lambda: job_status() not in ("queued", "running"), "the batch job (the worker)")
    assert job_status() == "succeeded"
    every = [proc.pid, *_children_of(proc.pid)]
    assert len(every) == 1 + len(SERVICES)
    for pid in every:
        for secret in (password, token):
            assert secret.encode() not in _cmdline(pid), _cmdline(pid)
    assert password not in log.read_text() and token not in log.read_text()


def test_up_restarts_a_child_that_dies(sid_model: SidModel, shared: SharedStack) -> None:
    # On the shared stack, before the next test stops it: a restarted decoder leaves the
    # stack as it was (five children, same ports, the catalog in Redis), and a stack start is
    # five processes importing their libraries, the most of this test's time on its own.
    proc, log, port, _ = shared.running()
    decoder = _child(proc.pid, b"widebeam\0decoder\0serve")
    os.kill(decoder, signal.SIGKILL)
    _wait(lambda: "restarting decoder" in log.read_text(), "the decoder's restart")
    # The launcher logs the restart, then spawns the process: wait for it to be there.
    _wait(lambda: _replaced(proc.pid, b"widebeam\0decoder\0serve", decoder), "a new decoder")
    # The restarted decoder loads the catalog from Redis and serves again on its old port.
    _wait(
        lambda: _recommend(f"http://127.0.0.1:{port}", sid_model).status_code == 200,
        "a recommendation from the restarted decoder",
    )
    assert proc.poll() is None, "the launcher must keep the stack running"
    assert "decoder exited with code -9; restarting it in 1 s" in log.read_text()


def test_up_serves_recommendations_and_stops_cleanly(
    sid_model: SidModel, shared: SharedStack
) -> None:
    proc, log, port, tmp_path = shared.running()
    children = _children_of(proc.pid)
    try:
        assert len(children) == len(SERVICES)
        reply = _recommend(f"http://127.0.0.1:{port}", sid_model)
        assert reply.status_code == 200, reply.text
        body = reply.json()
        assert len(body["items"]) == 4 and body["catalog"]["name"] == "default"
        text = log.read_text()
        assert "upload | catalog 'default' version 1" in text
        # The ready table names every service, and each URL answers as it says.
        urls = summary_urls(log)
        base = f"http://127.0.0.1:{port}"
        assert urls["gateway"] == base and urls["API docs"] == f"{base}/docs"
        assert urls["metrics"] == f"{base}/metrics"
        assert httpx.get(urls["API docs"], timeout=60).status_code == 200
        assert "widebeam_" in httpx.get(urls["metrics"], timeout=60).text
        assert httpx.get(f"{urls['catalog service']}/readyz", timeout=60).status_code == 200
        assert _decoder_info_code(urls["decoder (gRPC)"], None) == grpc.StatusCode.UNAUTHENTICATED
        assert urls["Redis"].startswith("redis://:***@127.0.0.1:")
        assert f"append-only file in {tmp_path / 'state' / 'redis'}" in text
    finally:
        code = stop_stack(proc)
    assert code == 0, log.read_text()[-3000:]
    assert not any(_alive(pid) for pid in children)


def test_up_stops_everything_when_a_child_dies_and_restarts_are_off(
    sid_model: SidModel, tmp_path: Path
) -> None:
    proc, log = _start(sid_model, free_port(), tmp_path, "--max-restarts", "0")
    children = _children_of(proc.pid)
    try:
        os.kill(_child(proc.pid, b"widebeam\0decoder\0serve"), signal.SIGKILL)
        code = proc.wait(LIMIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 1
    assert "decoder exited with code -9 after 0 restarts in a row" in log.read_text()
    assert not any(_alive(pid) for pid in children)


def test_up_port_zero_prints_the_real_port_and_children_die_with_a_killed_launcher(
    sid_model: SidModel, tmp_path: Path
) -> None:
    proc, log = launch(sid_model.model_dir, sid_model.catalog_path, 0, tmp_path)
    try:
        url = gateway_url(proc, log)
        assert not url.endswith(":0") and _recommend(url, sid_model).status_code == 200
        children = _children_of(proc.pid)
        assert len(children) == len(SERVICES)
        os.killpg(proc.pid, signal.SIGKILL)  # the launcher and its process group, no goodbye
        proc.wait(60)
        _wait(lambda: not any(_alive(pid) for pid in children), "the orphans' death", 60)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_up_sigterm_during_startup_stops_at_once(sid_model: SidModel, tmp_path: Path) -> None:
    # A Redis that accepts connections and never answers: start-up waits on it for minutes.
    with socket.socket() as hung:
        hung.bind(("127.0.0.1", 0))
        hung.listen(64)
        hung_url = f"redis://127.0.0.1:{hung.getsockname()[1]}/0"
        proc, log = launch(sid_model.model_dir, None, free_port(), tmp_path,
                           "--redis-url", hung_url, "--startup-timeout", "3600")  # fmt: skip
        try:
            _wait(lambda: len(_children_of(proc.pid)) >= 2, "the first children")
            children = _children_of(proc.pid)
            signalled = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(LIMIT_S)
            stopped_s = time.monotonic() - signalled
        finally:
            if proc.poll() is None:
                proc.kill()
    assert code == 0, log.read_text()[-3000:]
    assert "gateway: " not in log.read_text()
    # At once: the children's SIGTERM grace at most, nowhere near the hour of the timeout.
    assert stopped_s < 120, stopped_s
    assert not any(_alive(pid) for pid in children)
