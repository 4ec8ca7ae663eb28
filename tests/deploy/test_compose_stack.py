"""`docker compose up` for real (`make compose-test`; marker `docker`, skipped where no Docker
daemon answers): the CPU image built, docker-compose.yml + deploy/compose.cpu.yml up with the
tiny demo model, and over 127.0.0.1 a recommendation, an OpenAI-client completion, a catalog
upload and hot swap, and a batch job that survives a crash of the decoder and of the worker
(the restart policy brings both back; no row lost or duplicated); `down -v` leaves nothing.

The tests run in order against one stack. Where Docker Hub cannot be reached, Redis runs from
the image deploy/offline/build.sh makes of Debian's package (a third Compose file swaps it in).
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import httpx
import openai
import pytest

from tests.deploy.compose_stack import (
    ComposeStack,
    build_images,
    docker,
    docker_answers,
    wait_http,
)
from tests.deploy.helpers import COMPOSE, COMPOSE_CPU
from tests.support.redis_server import free_port

pytestmark = [
    pytest.mark.docker,
    pytest.mark.skipif(docker_answers() is not None, reason=f"needs Docker: {docker_answers()}"),
]
BATCH_ROWS = 1000
# How long the job may take after the crashes: the chunk the worker's crash cut off is sent
# again once its lease runs out (WIDEBEAM_BATCH_LEASE_S, 30 s, plus the watchdog's interval).
JOB_DEADLINE_S = 300


class Stack(NamedTuple):
    compose: ComposeStack
    gateway: str
    catalog: str
    catalog_file: Path
    work: Path


def _demo(work: Path) -> tuple[Path, Path]:
    """The tiny demo model and catalog, readable by the containers' uid 10001."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "widebeam",
            "demo",
            "build",
            "--tiny",
            "--out",
            str(work / "demo"),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    for path in [work, *work.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return work / "demo" / "model", work / "demo" / "catalog.jsonl"


def _override(work: Path, redis_image: str) -> Path:
    """A third Compose file: the Redis image, where the stand-in replaces redis:7.4-alpine."""
    services: dict[str, dict] = {}
    if redis_image != "redis:7.4-alpine":
        services["redis"] = {"image": redis_image}
    path = work / "compose.test.yml"
    path.write_text(json.dumps({"services": services}, indent=2))  # JSON is YAML
    return path


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    started = time.monotonic()
    images = build_images()
    built = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="widebeam-compose-"))
    model, catalog_file = _demo(work)
    gateway_port, catalog_port = free_port(), free_port()
    compose = ComposeStack(
        [COMPOSE, COMPOSE_CPU, _override(work, images["REDIS_IMAGE"])],
        {
            "MODEL_DIR": str(model),
            "GATEWAY_BIND": "127.0.0.1",
            "GATEWAY_PORT": str(gateway_port),
            "ADMIN_BIND": "127.0.0.1",
            "CATALOG_PORT": str(catalog_port),
            "REDIS_PASSWORD": secrets.token_hex(16),
            "COMPOSE_PROFILES": "",
        },
    )
    compose.down()  # a stack left over by an interrupted run
    try:
        compose.compose("up", "-d", "--no-build", "--wait", "--wait-timeout", "600", timeout=700)
        up = time.monotonic()
        print(f"\ncompose-test: images {built - started:.0f} s, up {up - built:.0f} s")
        yield Stack(
            compose,
            f"http://127.0.0.1:{gateway_port}",
            f"http://127.0.0.1:{catalog_port}",
            catalog_file,
            work,
        )
    finally:
        compose.down()
        print(f"compose-test: {time.monotonic() - started:.0f} s in all")


def _upload(stack: Stack, path: Path) -> int:
    with path.open("rb") as fh:
        reply = httpx.post(
            f"{stack.catalog}/v1/catalogs/default/versions",
            files={"file": (path.name, fh)},
            timeout=120,
        )
    assert reply.status_code == 201, reply.text
    return int(reply.json()["version"])


def _catalog(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _history(stack: Stack) -> list[str]:
    return [row["item_id"] for row in _catalog(stack.catalog_file)[:3]]


def _recommend(stack: Stack, **body: object) -> httpx.Response:
    return httpx.post(f"{stack.gateway}/v1/recommend", json=body, timeout=60)


def test_ports_are_published_on_loopback_only(stack: Stack) -> None:
    published = {}
    for service in ("redis", "catalog", "decoder", "gateway", "worker"):
        bindings = json.loads(
            docker(
                "inspect",
                "--format",
                "{{json .HostConfig.PortBindings}}",
                stack.compose.container(service),
            )
        )
        published[service] = {
            port: [b["HostIp"] for b in binds] for port, binds in (bindings or {}).items()
        }
    assert published == {
        "redis": {},
        "catalog": {"8300/tcp": ["127.0.0.1"]},
        "decoder": {},
        "gateway": {"8000/tcp": ["127.0.0.1"]},
        "worker": {},
    }


def test_first_catalog_makes_the_gateway_ready(stack: Stack) -> None:
    assert _upload(stack, stack.catalog_file) == 1
    wait_http(f"{stack.gateway}/readyz", timeout_s=120)


def test_recommendation(stack: Stack) -> None:
    reply = _recommend(stack, history=_history(stack), n=5, beam_width=8)
    assert reply.status_code == 200, reply.text
    body = reply.json()
    items = [x["item_id"] for x in body["items"]]
    assert len(items) == 5 == len(set(items))
    known = {row["item_id"] for row in _catalog(stack.catalog_file)}
    assert set(items) <= known and str(body["catalog"]["version"]) == "1"


def test_openai_client_completion(stack: Stack) -> None:
    client = openai.OpenAI(base_url=f"{stack.gateway}/v1", api_key="unused", timeout=60)
    completion = client.completions.create(
        model=client.models.list().data[0].id,
        prompt="<t_1><t_2><t_3>",
        max_tokens=3,
        n=4,
        extra_body={"beam_width": 4},
    )
    assert [c.index for c in completion.choices] == [0, 1, 2, 3]


def test_catalog_upload_and_hot_swap(stack: Stack) -> None:
    rows = _catalog(stack.catalog_file)
    renamed = [{**row, "item_id": f"v2-{row['item_id']}"} for row in rows[3:]]
    v2 = stack.work / "catalog-v2.jsonl"
    v2.write_text("".join(json.dumps(row) + "\n" for row in rows[:3] + renamed))
    decoder_before = stack.compose.state("decoder")["StartedAt"]
    assert _upload(stack, v2) == 2
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        body = _recommend(stack, history=_history(stack), n=5, beam_width=8).json()
        if str(body["catalog"]["version"]) == "2":
            break
        time.sleep(0.5)
    assert str(body["catalog"]["version"]) == "2", body
    assert all(x["item_id"].startswith("v2-") for x in body["items"]), body
    assert stack.compose.state("decoder")["StartedAt"] == decoder_before  # swapped, not restarted


def _job_status(stack: Stack, job: str) -> dict:
    return httpx.get(f"{stack.gateway}/v1/batch-jobs/{job}", timeout=30).json()


def _wait_restarted(stack: Stack, service: str, restarts: int) -> None:
    deadline = time.monotonic() + 60
    while stack.compose.restarts(service) == restarts:
        assert time.monotonic() < deadline, f"{service} was not restarted"
        time.sleep(0.5)
    stack.compose.wait_healthy(service, timeout_s=300)


def test_batch_job_survives_a_decoder_and_a_worker_crash(stack: Stack) -> None:
    items = [row["item_id"] for row in _catalog(stack.catalog_file)[:3]]
    rows = [
        {"user_id": f"u{i}", "history": items, "n": 3, "beam_width": 4} for i in range(BATCH_ROWS)
    ]
    reply = httpx.post(f"{stack.gateway}/v1/batch-jobs", json={"requests": rows}, timeout=60)
    assert reply.status_code == 202, reply.text
    job = reply.json()["id"]
    while _job_status(stack, job)["done"] == 0:
        time.sleep(0.2)
    # Both crash at once, mid-job: nothing runs until the worker is back, and its rows then
    # wait for the decoder.
    restarts = {service: stack.compose.restarts(service) for service in ("decoder", "worker")}
    status = _job_status(stack, job)
    for service in restarts:
        stack.compose.crash(service)
    assert status["status"] in ("queued", "running") and status["done"] < BATCH_ROWS, status
    for service, before in restarts.items():
        _wait_restarted(stack, service, before)
    deadline = time.monotonic() + JOB_DEADLINE_S
    status = _job_status(stack, job)
    while status["status"] in ("queued", "running") and time.monotonic() < deadline:
        time.sleep(1)
        status = _job_status(stack, job)
    assert status["status"] == "succeeded" and status["done"] == BATCH_ROWS, status
    lines = httpx.get(f"{stack.gateway}/v1/batch-jobs/{job}/results", timeout=60).text
    results = [json.loads(line) for line in lines.splitlines()]
    assert [r["row"] for r in results] == list(range(BATCH_ROWS))  # none lost, none twice
    failed = [r for r in results if "error" in r or len(r.get("items", [])) != 3]
    assert not failed, failed[:5]


def test_down_leaves_nothing_running(stack: Stack) -> None:
    stack.compose.down()
    assert stack.compose.leftovers() == []
