"""Faults: the catalog service process (`widebeam catalog serve`, stopped with SIGTERM) and
the gateway process (`widebeam gateway serve`, SIGKILLed) restarted under load, each on its
own port again, with a decoder following the catalog in Redis and a `widebeam worker` running
batch jobs throughout.

Clients keep sending: recommendations through the gateway, item lookups from the catalog
service, batch-job status reads. Every 200 must be right for the catalog version it reports
(the catalog is republished between the two restarts with other items and other SIDs); the
only failures allowed are connection errors while a process is down; no catalog version, item
or batch row is lost."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
import redis
from google.protobuf import empty_pb2

from tests.reliability.faults_support import Tally, run_clients, stop_clients
from tests.reliability.support import free_port, process, wait_http
from tests.services.decoder.conftest import SID_LEVELS, SidModel
from tests.services.decoder.server.conftest import make_settings
from tests.services.gateway.batch.conftest import Worker, batch_settings, wait_for
from tests.services.gateway.batch.test_worker_e2e import assert_complete
from tests.support.redis_server import RedisServer
from widebeam.services.catalog.sid_layout import SidLayout
from widebeam.services.catalog.store import CatalogStore
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2_grpc as pb_grpc
from widebeam.services.decoder.server.background import BackgroundServer

pytestmark = pytest.mark.slow

NAMESPACE = "rst"
NAME = "default"
ROWS = 200
# History items kept by both versions (with other SIDs in v2), so requests stay valid.
RECOMMEND = {"history": ["item-150", "item-200", "item-250"], "n": 4, "beam_width": 8}
LOOKUP_ITEM = "item-150"
# Answers every client must have before the faults and after the last restart.
ANSWERS = 5
# Transport failures a client may see while a process restarts; anything else is a finding.
CONNECTION_ERRORS = {"ConnectError", "RemoteProtocolError", "ReadError", "WriteError"}

Catalogs = dict[str, dict[str, tuple[int, ...]]]  # version -> item -> SID


def v2_catalog() -> dict[str, tuple[int, ...]]:
    """v1 without item-0..99, the rest with new SIDs, plus 300 new items."""
    rng = random.Random(29)
    ids = [f"item-{i}" for i in range(100, 300)] + [f"new-item-{i}" for i in range(300)]
    return {i: tuple(rng.randrange(s) for s in SID_LEVELS) for i in ids}


def requests(count: int) -> list[dict[str, Any]]:
    """Batch rows whose histories exist in both versions (item-100..299)."""
    return [
        {
            "user_id": f"user-{i}",
            "history": [f"item-{100 + i % 200}", f"item-{100 + (7 * i) % 200}"],
            "n": 4,
            "beam_width": 8,
        }
        for i in range(count)
    ]


def jsonl(catalog: dict[str, tuple[int, ...]]) -> bytes:
    lines = (json.dumps({"item_id": k, "sid": list(v)}) for k, v in catalog.items())
    return ("\n".join(lines) + "\n").encode()


Sample = tuple[str, list[tuple[str, tuple[int, ...]]]]  # (version, [(item, SID), ...])


def recommend_ok(samples: list[Sample]) -> Any:
    """Keeps what each 200 claims, checked against the published versions at the end (the
    second version number is only known once its publish answers)."""

    def check(response: httpx.Response) -> bool:
        body = response.json()
        items = [(it["item_id"], tuple(it["sid"])) for it in body["items"]]
        samples.append((body["catalog"]["version"], items))
        return len(items) == RECOMMEND["n"]

    return check


def lookup_ok(samples: list[Sample]) -> Any:
    def check(response: httpx.Response) -> bool:
        body = response.json()
        samples.append((str(body["version"]), [(body["item_id"], tuple(body["sid"]))]))
        return body["item_id"] == LOOKUP_ITEM

    return check


def wrong(samples: list[Sample], catalogs: Catalogs) -> list[Sample]:
    """The answers whose items are not, with those SIDs, in the version they name."""
    return [
        (version, items)
        for version, items in samples
        if version not in catalogs or any(catalogs[version].get(i) != sid for i, sid in items)
    ]


def job_ok(response: httpx.Response) -> bool:
    body = response.json()
    return body["total"] == ROWS and 0 <= body["done"] <= ROWS and body["failed"] == 0


def restart(
    stack: ExitStack, proc: subprocess.Popen[bytes], args: list[str], env: dict[str, str],
    log: Path, ready: str, sig: int,
) -> subprocess.Popen[bytes]:  # fmt: skip
    """Stop with `sig` (SIGTERM: graceful, requests in flight finish; SIGKILL: a crash), wait
    for the exit, start a new process with the same arguments (same port)."""
    proc.send_signal(sig)
    proc.wait(30)
    return stack.enter_context(process(args, env, log.with_stem(f"{log.stem}-2"), ready))


def served_version(stub: pb_grpc.DecoderStub) -> str | None:
    info = stub.GetInfo(empty_pb2.Empty(), timeout=5)
    return next((c.version for c in info.catalogs if c.name == NAME), None)


def test_catalog_service_and_gateway_restarted_under_load(
    sid_model: SidModel, tmp_path: Path
) -> None:
    layout = SidLayout.from_tokenizer(str(sid_model.model_dir))
    assert layout is not None
    v1_items = dict(sid_model.catalog)
    v2_items = v2_catalog()
    redis_server = RedisServer(tmp_path / "redis")
    redis_server.start()
    url = redis_server.url
    catalog_port, gateway_port = free_port(), free_port()
    catalog_url = f"http://127.0.0.1:{catalog_port}"
    gateway_url = f"http://127.0.0.1:{gateway_port}"
    catalog_args = ["catalog", "serve", "--port", str(catalog_port)]
    catalog_env = {
        "WIDEBEAM_CATALOG_REDIS_URL": url,
        "WIDEBEAM_CATALOG_NAMESPACE": NAMESPACE,
        "WIDEBEAM_CATALOG_SID_LAYOUT": layout.to_spec(),
    }
    catalog_ready = "catalog service listening on"
    tallies = {"recommend": Tally(), "lookup": Tally(), "job": Tally()}
    samples: dict[str, list[Sample]] = {"recommend": [], "lookup": []}
    with ExitStack() as stack:
        stack.callback(redis_server.stop)
        catalog_log = tmp_path / "catalog.log"
        catalog = stack.enter_context(
            process(catalog_args, catalog_env, catalog_log, catalog_ready)
        )
        published = httpx.post(
            f"{catalog_url}/v1/catalogs/{NAME}/versions", content=jsonl(v1_items), timeout=60
        )
        assert published.status_code == 201, published.text
        versions = {str(published.json()["version"]): v1_items}

        decoder = stack.enter_context(
            BackgroundServer(
                make_settings(
                    sid_model, catalog_file=None, redis_url=url, catalog_namespace=NAMESPACE
                )
            )
        )
        stub = pb_grpc.DecoderStub(stack.enter_context(grpc.insecure_channel(decoder.address)))
        wait_for(lambda: served_version(stub) in versions, 30, "the decoder to serve v1")

        gateway_args = ["gateway", "serve", "--port", str(gateway_port), "--decoder",
                        decoder.address, "--redis-url", url, "--request-timeout", "10"]  # fmt: skip
        gateway_log = tmp_path / "gateway.log"
        gateway_ready = "gateway listening on"
        gateway = stack.enter_context(process(gateway_args, {}, gateway_log, gateway_ready))
        wait_http(f"{gateway_url}/healthz")
        worker = Worker(batch_settings(url, decoder.address), tmp_path / "worker.log")
        stack.callback(worker.stop)
        worker.wait_ready()

        submitted = httpx.post(f"{gateway_url}/v1/batch-jobs", json={"requests": requests(ROWS)})
        assert submitted.status_code == 202, submitted.text
        jobs = [submitted.json()["id"]]

        threads = [
            run_clients(2, url=f"{gateway_url}/v1/recommend", body=RECOMMEND,
                        tally=tallies["recommend"], check=recommend_ok(samples["recommend"]),
                        timeout=20),
            run_clients(1, url=f"{catalog_url}/v1/catalogs/{NAME}/items/{LOOKUP_ITEM}",
                        body=None, tally=tallies["lookup"], check=lookup_ok(samples["lookup"]),
                        timeout=20, pause=0.02),
            run_clients(1, url=f"{gateway_url}/v1/batch-jobs/{jobs[0]}", body=None,
                        tally=tallies["job"], check=job_ok, timeout=20, pause=0.05),
        ]  # fmt: skip
        try:
            began = time.monotonic()
            for tally in tallies.values():  # every client answered a few times before the faults
                tally.wait_for_answers(ANSWERS, since=began, timeout=60)
            catalog_restart = time.monotonic()
            catalog = restart(stack, catalog, catalog_args, catalog_env, catalog_log,
                              catalog_ready, signal.SIGTERM)  # fmt: skip
            wait_http(f"{catalog_url}/healthz")
            catalog_back = time.monotonic()
            # The new process publishes v2; the decoder swaps it in under load.
            v2 = httpx.post(
                f"{catalog_url}/v1/catalogs/{NAME}/versions", content=jsonl(v2_items), timeout=60
            )
            assert v2.status_code == 201, v2.text
            versions[str(v2.json()["version"])] = v2_items
            wait_for(lambda: served_version(stub) == str(v2.json()["version"]), 30, "v2 served")
            time.sleep(1.0)
            gateway_restart = time.monotonic()
            gateway = restart(stack, gateway, gateway_args, {}, gateway_log, gateway_ready,
                              signal.SIGKILL)  # fmt: skip
            wait_http(f"{gateway_url}/healthz")
            gateway_back = time.monotonic()
            # A job submitted to the new process, next to the one submitted before.
            again = httpx.post(f"{gateway_url}/v1/batch-jobs", json={"requests": requests(ROWS)})
            assert again.status_code == 202, again.text
            jobs.append(again.json()["id"])
            # Counted, not timed: a few answers of every client sent once the new gateway
            # listened (past the outage window the failure checks allow), however slow the
            # machine is.
            settled = gateway_back + 0.5
            for tally in tallies.values():
                tally.wait_for_answers(ANSWERS, since=settled, timeout=60)
        finally:
            for workers, stop in threads:
                stop_clients(workers, stop)

        def finished(job_id: str) -> dict[str, Any] | None:
            job = httpx.get(f"{gateway_url}/v1/batch-jobs/{job_id}", timeout=10).json()
            return job if job["status"] not in ("queued", "running") else None

        done = [wait_for(lambda j=j: finished(j), 60, f"job {j}", step=0.2) for j in jobs]
        rows = []
        for job_id in jobs:
            results = httpx.get(f"{gateway_url}/v1/batch-jobs/{job_id}/results", timeout=30)
            assert results.status_code == 200, results.text
            rows.append([json.loads(line) for line in results.text.splitlines()])
        listing = httpx.get(f"{catalog_url}/v1/catalogs/{NAME}", timeout=10).json()
        assert catalog.poll() is None and gateway.poll() is None
        assert worker.proc.poll() is None
        # Catalog data intact: both versions with every item and SID, v2 current.
        store = CatalogStore(redis.Redis.from_url(url), NAMESPACE)
        assert store.list_versions(NAME) == sorted(int(v) for v in versions)
        assert store.current_version(NAME) == max(int(v) for v in versions)
        for version, items in versions.items():
            loaded = store.load(NAME, int(version))  # checksums verified
            assert loaded.trie.num_items == len(items)
            assert store.item_sids(NAME, int(version), list(items)) == list(items.values())

    figures = []
    for kind, tally in tallies.items():
        counts = tally.counts()
        c_fail, c_rec = tally.outage(catalog_restart, catalog_back + 0.5)
        g_fail, g_rec = tally.outage(gateway_restart, gateway_back + 0.5)
        figures.append(
            f"{kind}: sent {len(tally.calls)}, {dict(counts)}, max latency "
            f"{tally.max_latency():.2f} s; catalog restart: {c_fail} failed, back after "
            f"{c_rec if c_rec is None else round(c_rec, 2)} s; gateway restart: {g_fail} "
            f"failed, back after {g_rec if g_rec is None else round(g_rec, 2)} s"
        )
    print("\nrestarts under load:\n  " + "\n  ".join(figures))
    checked = {k: len(v) for k, v in samples.items()}
    print(
        f"  jobs: {[(j['status'], j['done'], j['failed']) for j in done]}, rows "
        f"{[len(r) for r in rows]}; catalog versions {listing['versions']}, current "
        f"{listing['current_version']}; answers checked against their version {checked}"
    )
    for kind, answers in samples.items():
        assert not wrong(answers, versions), (kind, wrong(answers, versions)[:3])
        assert {v for v, _ in answers} == set(versions), kind  # both versions were served
    for kind, tally in tallies.items():
        bad = set(tally.counts()) - {"200"} - CONNECTION_ERRORS
        assert not bad, f"{kind}: {tally.counts()}"
        assert tally.counts()["200"] >= 2 * ANSWERS, f"{kind}: {tally.counts()}"
        # Back after each restart: every call sent once the new gateway listened succeeded.
        after = tally.counts(since=settled)
        assert set(after) == {"200"} and after["200"] >= ANSWERS, (kind, after)
    # Failures only while the restarted process was down (in flight at the stop, or sent
    # before the new process listened), and only for its own clients.
    windows = {
        "lookup": (catalog_restart, catalog_back),
        "recommend": (gateway_restart, gateway_back),
        "job": (gateway_restart, gateway_back),
    }
    for kind, (down, back) in windows.items():
        failed = sum(n for k, n in tallies[kind].counts().items() if k != "200")
        assert tallies[kind].outage(down, back + 0.5)[0] == failed, kind
    for job, job_rows in zip(done, rows, strict=True):
        assert (job["status"], job["done"], job["failed"]) == ("succeeded", ROWS, 0), job
        assert_complete(job_rows, ROWS)
    assert listing["versions"] == sorted(int(v) for v in versions), listing
