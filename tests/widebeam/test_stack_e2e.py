"""The serving stack's acceptance, end to end over `widebeam up` (real processes, free ports):
recommendations from the pinned catalog version, OpenAI beams, a 200-row batch job, a catalog
swap under traffic, and bad input answered 4xx."""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import httpx
import openai
import pytest

from tests.services.decoder.conftest import SID_LEVELS, SidModel
from tests.support.child_process import stop_child
from tests.support.redis_server import find_redis_server, free_port
from tests.widebeam.stack import start_stack

pytestmark = pytest.mark.skipif(find_redis_server() is None, reason="needs redis-server")
KEY = "e2e-secret-key"
AUTH = {"Authorization": f"Bearer {KEY}"}


class Stack(NamedTuple):
    gateway: str
    catalog: str
    model: SidModel


@pytest.fixture(scope="module")
def stack(sid_model: SidModel, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    port, catalog_port = free_port(), free_port()
    proc, log = start_stack(
        sid_model.model_dir,
        sid_model.catalog_path,
        port,
        tmp_path_factory.mktemp("stack"),
        "--api-key",
        KEY,
        "--catalog-port",
        str(catalog_port),
    )
    try:
        yield Stack(f"http://127.0.0.1:{port}", f"http://127.0.0.1:{catalog_port}", sid_model)
    finally:
        stop_child(proc, grace_s=60)
        assert KEY not in log.read_text()  # the key never reaches a log


def _recommend(stack: Stack, **body: object) -> httpx.Response:
    return httpx.post(f"{stack.gateway}/v1/recommend", json=body, headers=AUTH, timeout=60)


def _catalog_has(stack: Stack, item: str, version: str) -> bool:
    url = f"{stack.catalog}/v1/catalogs/default/items/{item}?version={version}"
    return httpx.get(url, timeout=10).status_code == 200


def test_recommend_returns_distinct_catalog_items_without_excluded(stack: Stack) -> None:
    history = [item for item, _ in stack.model.catalog[:4]]
    exclude = [item for item, _ in stack.model.catalog[4:30]]
    reply = _recommend(stack, history=history, n=8, beam_width=16, exclude=exclude)
    assert reply.status_code == 200, reply.text
    body = reply.json()
    items = [x["item_id"] for x in body["items"]]
    assert len(items) == 8 == len(set(items))
    assert not set(items) & (set(exclude) | set(history))
    version = body["catalog"]["version"]
    assert all(_catalog_has(stack, item, version) for item in items)


def test_openai_client_gets_k_choices_from_a_beam_request(stack: Stack) -> None:
    client = openai.OpenAI(base_url=f"{stack.gateway}/v1", api_key=KEY)
    completion = client.completions.create(
        model=client.models.list().data[0].id,
        prompt="<t_1><t_2><t_3>",
        max_tokens=4,
        n=6,
        extra_body={"beam_width": 6},
    )
    assert len(completion.choices) == 6
    assert [c.index for c in completion.choices] == list(range(6))


def test_batch_job_of_200_rows_completes_in_order(stack: Stack) -> None:
    items = [item for item, _ in stack.model.catalog]
    rows = [
        {"user_id": f"u{i}", "history": items[i % 50 : i % 50 + 3], "n": 3, "beam_width": 4}
        for i in range(200)
    ]
    reply = httpx.post(f"{stack.gateway}/v1/batch-jobs", json={"requests": rows}, headers=AUTH)
    assert reply.status_code == 202, reply.text
    job = reply.json()["id"]
    deadline = time.time() + 240
    while time.time() < deadline:
        status = httpx.get(f"{stack.gateway}/v1/batch-jobs/{job}", headers=AUTH).json()
        if status["status"] not in ("queued", "running"):
            break
        time.sleep(1)
    assert status["status"] == "succeeded" and status["done"] == 200, status
    lines = httpx.get(f"{stack.gateway}/v1/batch-jobs/{job}/results", headers=AUTH).text
    results = [json.loads(line) for line in lines.splitlines()]
    assert [r["row"] for r in results] == list(range(200))
    assert all(r["user_id"] == f"u{i}" and len(r["items"]) == 3 for i, r in enumerate(results))


def test_catalog_swap_under_traffic(stack: Stack, tmp_path: Path) -> None:
    """No request fails; every response's items belong to the version it reports; traffic moves
    to the new version (within a generous deadline: the swap's time is the machine's), and once
    one answer has come back from it, every request sent afterwards is answered from it."""
    history = [item for item, _ in stack.model.catalog[:3]]
    new_catalog = tmp_path / "v2.jsonl"
    rng = random.Random(99)
    new_rows = [(f"v2-item-{i}", [rng.randrange(c) for c in SID_LEVELS]) for i in range(200)]
    # The history items keep their SIDs, so old histories still map in the new version.
    new_rows += [(item, list(sid)) for item, sid in stack.model.catalog[:3]]
    new_catalog.write_text(
        "".join(json.dumps({"item_id": i, "sid": s}) + "\n" for i, s in new_rows)
    )
    new_ids = {item for item, _ in new_rows}
    # (sent at, answered at, status, version, item ids), in the order they were sent
    seen: list[tuple[float, float, int, str, list[str]]] = []
    stop = threading.Event()

    def traffic() -> None:
        while not stop.is_set():
            sent = time.monotonic()
            reply = _recommend(stack, history=history, n=4, beam_width=8)
            body = reply.json() if reply.status_code == 200 else {}
            version = body.get("catalog", {}).get("version", "")
            items = [x["item_id"] for x in body.get("items", [])]
            seen.append((sent, time.monotonic(), reply.status_code, version, items))

    def answered_after(at: float, version: str) -> int:
        return sum(1 for sent, _, _, v, _ in list(seen) if sent > at and v == version)

    before = _recommend(stack, history=history, n=4, beam_width=8).json()["catalog"]["version"]
    thread = threading.Thread(target=traffic)
    thread.start()
    try:
        with new_catalog.open("rb") as fh:
            upload = httpx.post(
                f"{stack.catalog}/v1/catalogs/default/versions",
                headers=AUTH,
                files={"file": ("v2.jsonl", fh)},
                timeout=60,
            )
        assert upload.status_code == 201, upload.text
        new_version = str(upload.json()["version"])
        deadline = time.monotonic() + 120
        while not any(v == new_version for *_, v, _ in list(seen)):
            assert time.monotonic() < deadline, "no answer from the new version in 120 s"
            time.sleep(0.05)
        first_new = min(answered for _, answered, _, v, _ in list(seen) if v == new_version)
        while answered_after(first_new, new_version) < 5:  # more traffic after the swap
            assert time.monotonic() < deadline, "the traffic stopped after the swap"
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join(60)
    assert new_version != before
    failed = [s[2:4] for s in seen if s[2] != 200]
    assert seen and not failed, failed
    for _, _, _, version, items in seen:
        assert version in (before, new_version)
        if version == new_version:
            assert set(items) <= new_ids
    after_swap = [version for sent, _, _, version, _ in seen if sent > first_new]
    assert len(after_swap) >= 5 and set(after_swap) == {new_version}, after_swap


@pytest.mark.parametrize(
    "body,status",
    [
        ({"history": ["item-1"], "catalog": "nope"}, 404),
        ({"history": ["item-1"], "n": 9, "beam_width": 4}, 400),
        ({"history": ["item-1"], "beam_width": 100_000}, 400),
        ({"history": []}, 400),
    ],
)
def test_bad_input_is_4xx_with_a_message(stack: Stack, body: dict, status: int) -> None:
    reply = _recommend(stack, **body)
    assert reply.status_code == status, reply.text
    assert reply.json()["error"]["message"]


def test_malformed_json_and_missing_key(stack: Stack) -> None:
    reply = httpx.post(f"{stack.gateway}/v1/recommend", content=b"{not json", headers=AUTH)
    assert reply.status_code == 400 and reply.json()["error"]["message"]
    reply = httpx.post(f"{stack.gateway}/v1/recommend", json={"history": ["item-1"]})
    assert reply.status_code == 401
