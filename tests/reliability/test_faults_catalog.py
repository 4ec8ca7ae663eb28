"""Faults in catalog publishing: redis-server restarted (data kept) while the real catalog
service publishes a version, with a real decoder gRPC server following the catalog in Redis.

The publish either completes or fails with a clear 503 and a retry succeeds; `current` only
ever names a complete version; every service reconnects by itself and the decoder serves the
published version within a bounded time. Redis losing its data mid-publish (a restart without
persistence, FLUSHALL) is a 503 `catalog_state_lost` that leaves nothing behind, and the upload
sent again succeeds."""

from __future__ import annotations

import json
import random
import threading
import time
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
import redis
from google.protobuf import empty_pb2

from tests.reliability.faults_support import restart_keeping_data
from tests.reliability.support import CatalogApp
from tests.services.catalog.formats import catalog_writers as cw
from tests.services.decoder.conftest import SID_LEVELS, SidModel
from tests.services.decoder.server.conftest import make_settings
from tests.services.gateway.batch.conftest import wait_for
from tests.support.redis_server import RedisServer
from widebeam.services.catalog.formats import build_trie, load_catalog
from widebeam.services.catalog.service import CatalogSettings
from widebeam.services.catalog.sid_layout import SidLayout
from widebeam.services.catalog.store import CatalogStore
from widebeam.services.catalog.store.keys import NamespaceKeys
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2 as pb
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2_grpc as pb_grpc
from widebeam.services.decoder.server.background import BackgroundServer

pytestmark = pytest.mark.slow

NAMESPACE = "flt"
NAME = "default"
V2_ITEMS = 100_000  # ~5 MB of JSONL: the publish writes for most of a second on 2 cores

# `current` and whether its manifest exists, read atomically: a partial artifact has none.
_CURRENT_COMPLETE = """
local v = redis.call('GET', KEYS[1])
if not v then return {false, 0} end
return {v, redis.call('EXISTS', ARGV[1] .. v .. ':manifest')}
"""


def _catalog_settings(sid_model: SidModel, redis_url: str) -> CatalogSettings:
    layout = SidLayout.from_tokenizer(str(sid_model.model_dir))
    assert layout is not None
    return CatalogSettings(
        redis_url=redis_url, namespace=NAMESPACE, port=0, sid_layout=layout.to_spec(),
        max_upload_bytes=64 << 20,
    )  # fmt: skip


def v2_catalog() -> tuple[bytes, dict[str, tuple[int, ...]]]:
    rng = random.Random(23)
    items = {f"v2-item-{i}": tuple(rng.randrange(s) for s in SID_LEVELS) for i in range(V2_ITEMS)}
    body = "".join(json.dumps({"item_id": k, "sid": list(v)}) + "\n" for k, v in items.items())
    return body.encode(), items


class CurrentWatcher:
    """Samples `current` every few ms through the restart; records every version it saw and
    whether that version's manifest existed at the same instant."""

    def __init__(self, url: str) -> None:
        self.client = redis.Redis.from_url(url, socket_timeout=2)
        self.script = self.client.register_script(_CURRENT_COMPLETE)
        prefix = f"{NAMESPACE}:cat:{NAME}"
        self.keys, self.args = [f"{prefix}:current"], [f"{prefix}:v:"]
        self.seen: dict[int, bool] = {}  # version -> complete every time it was seen
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            try:
                raw, complete = self.script(keys=self.keys, args=self.args)
            except redis.RedisError:
                continue  # Redis is restarting
            self.samples += 1
            if raw is not None:
                version = int(raw)
                self.seen[version] = self.seen.get(version, True) and bool(complete)

    def __enter__(self) -> CurrentWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self.client.close()


def served_version(stub: pb_grpc.DecoderStub) -> str | None:
    try:
        info = stub.GetInfo(empty_pb2.Empty(), timeout=2)
    except grpc.RpcError:
        return None
    return next((c.version for c in info.catalogs if c.name == NAME), None)


def step_writes(probe: redis.Redis, key: str) -> bool:
    """Whether `key` exists; if not, lets the paused writes run for one round trip."""
    if probe.exists(key):
        return True
    probe.execute_command("CLIENT", "UNPAUSE")
    probe.execute_command("CLIENT", "PAUSE", "5000", "WRITE")
    return False


@pytest.mark.parametrize("phase", ["staged", "lookups"])
def test_redis_restarted_while_a_catalog_version_is_published(
    own_redis: RedisServer,
    sid_model: SidModel,
    tmp_path: Path,
    phase: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """`staged`: restart as soon as the version has its staging entry (the artifact chunks are
    being written); `lookups`: while the item -> SID tables stream to Redis."""
    caplog.set_level("WARNING", logger="widebeam.services.catalog.store.store")
    settings = _catalog_settings(sid_model, own_redis.url)
    body, items = v2_catalog()
    probe = redis.Redis.from_url(own_redis.url)
    staging = f"{NAMESPACE}:cat:{NAME}:staging"
    versions_key = NamespaceKeys(NAMESPACE).catalog(NAME).versions
    attempts: list[tuple[int, str, float]] = []  # (status, error code or "", seconds)

    def upload(catalog: CatalogApp, content: bytes) -> httpx.Response:
        began = time.monotonic()
        response = httpx.post(
            f"{catalog.url}/v1/catalogs/{NAME}/versions", content=content, timeout=120,
            headers={"Content-Type": "application/x-ndjson"},
        )  # fmt: skip
        code = "" if response.status_code == 201 else response.json()["error"]["code"]
        attempts.append((response.status_code, code, time.monotonic() - began))
        return response

    with CatalogApp(settings) as catalog:
        first = upload(catalog, sid_model.catalog_path.read_bytes())
        assert first.status_code == 201, first.text
        v1 = first.json()["version"]
        decoder_settings = make_settings(
            sid_model, catalog_file=None, redis_url=own_redis.url, catalog_namespace=NAMESPACE
        )
        with (
            BackgroundServer(decoder_settings) as decoder,
            grpc.insecure_channel(decoder.address) as channel,
            CurrentWatcher(own_redis.url) as watcher,
        ):
            stub = pb_grpc.DecoderStub(channel)
            wait_for(lambda: served_version(stub) == str(v1), 30, "the decoder to serve v1")

            outcome: dict[str, httpx.Response] = {}
            publisher = threading.Thread(
                target=lambda: outcome.setdefault("first", upload(catalog, body)), daemon=True
            )
            publisher.start()
            staged = wait_for(lambda: probe.zrange(staging, 0, 0), 60, "a staged version", 0.001)
            # Hold the publisher's next write until the shutdown lands (SHUTDOWN is not held):
            # on busy cores the rest of the stream could otherwise finish before the restart.
            probe.execute_command("CLIENT", "PAUSE", "5000", "WRITE")
            if phase == "lookups":
                # The lookup tables' first bucket (item ids of positions 0..) is written first.
                # A small version's tables go out in one batch, right before the commit, so
                # polling could miss the moment: its writes are let through a few at a time
                # (each unpause lasts one round trip) until the bucket is there, the commit
                # still held.
                version_keys = NamespaceKeys(NAMESPACE).catalog(NAME).version(int(staged[0]))
                bucket = version_keys.name_bucket(0)
                wait_for(lambda: step_writes(probe, bucket), 60, "the lookup tables", step=0)
            # The version was not committed when Redis went down: the restart landed inside
            # the publish (the commit is a write, held by the pause).
            staged_version = int(staged[0])
            cut_inside = probe.zscore(versions_key, str(staged_version)) is None
            down_s = restart_keeping_data(own_redis)
            restarted = time.monotonic()
            publisher.join(120)
            response = outcome["first"]
            first_error = ""
            retries = 0
            while response.status_code == 503 and retries < 3:
                # A clean failure: a clear message, a Retry-After, nothing made current.
                error = response.json()["error"]
                first_error = first_error or f"{error['code']}: {error['message']}"
                assert "retry" in error["message"].lower(), error
                time.sleep(float(response.headers["Retry-After"]))
                retries += 1
                response = upload(catalog, body)
            assert response.status_code == 201, response.text
            published_at = time.monotonic()
            v2 = response.json()["version"]
            wait_for(lambda: served_version(stub) == str(v2), 30, "the decoder to serve v2")
            served_s = time.monotonic() - restarted
            served_after_publish_s = time.monotonic() - published_at

            # Recommend answers from v2, and says so.
            reply = stub.Recommend(
                pb.RecommendRequest(history_item_ids=["v2-item-1", "v2-item-2"], n=4, catalog=NAME),
                timeout=10,
            )
            assert reply.catalog.version == str(v2)
            assert len(reply.items) == 4
            for item in reply.items:
                assert tuple(item.sid.codes) == items[item.item_id]
            readyz = httpx.get(f"{catalog.url}/readyz", timeout=10)
        assert readyz.status_code == 200, readyz.text

    # `current` only ever named complete versions, and now names v2 with its full content.
    assert watcher.seen and all(watcher.seen.values()), watcher.seen
    assert set(watcher.seen) <= {v1, v2}, watcher.seen
    store = CatalogStore(probe, NAMESPACE)
    loaded = store.load(NAME)  # checksums and content hash verified
    assert loaded.version == v2 and loaded.trie.num_items == V2_ITEMS
    assert store.item_sid(NAME, None, "v2-item-7") == items["v2-item-7"]
    rewrites = caplog.text.count("writing again")
    # Cut inside the publish (for `lookups`, once its lookup tables were being written): the
    # writes went out again (the store's "writing again", or redis-py's own retry of a
    # pipeline), or the upload failed cleanly and was retried; either way v2 is complete.
    assert (cut_inside and v2 == staged_version) or first_error, (cut_inside, v2, staged_version)
    print(
        f"\nredis restart mid-publish ({phase}): {V2_ITEMS} items, redis down {down_s:.2f} s, "
        f"staged writes restarted {rewrites}x; upload attempts "
        f"{[(s, c, round(t, 2)) for s, c, t in attempts[1:]]}"
        f"{f' (first: {first_error})' if first_error else ''}; published v{v2}; decoder "
        f"serves it {served_s:.2f} s after the restart, {served_after_publish_s:.2f} s after "
        f"the publish answered; `current` sampled {watcher.samples} times, versions seen "
        f"{sorted(watcher.seen)}, all complete"
    )


def test_a_commit_sent_again_after_its_reply_was_lost_is_a_success(
    own_redis: RedisServer,
) -> None:
    """redis-py sends a command again when the connection broke before the reply came. A
    COMMIT that had already run then finds its staging entry gone (STAGING_LOST). The publish
    must report the committed version, not an error: a client told "failed" publishes the same
    catalog again, as a new version."""
    store = CatalogStore(redis.Redis.from_url(own_redis.url), NAMESPACE)
    commit = store._commit

    def run_twice(**kwargs: Any) -> Any:
        commit(**kwargs)  # ran; its reply lost with the connection
        return commit(**kwargs)

    store._commit = run_twice  # type: ignore[assignment]
    trie = build_trie(load_catalog(cw.jsonl(), layout=cw.LAYOUT), cw.LAYOUT)
    published = store.publish(NAME, trie)
    assert published.activated and store.current_version(NAME) == published.version
    assert store.load(NAME).trie.content_hash == trie.content_hash
    assert store.list_versions(NAME) == [published.version]


def _pause_writes_while_staged(probe: redis.Redis, staging: str, version: bytes) -> None:
    """Every client's writes wait (the publisher's next chunk or its COMMIT) until Redis
    stops; checked after the pause, so the version is known to be staged, not committed."""
    probe.execute_command("CLIENT", "PAUSE", 60_000, "WRITE")
    assert probe.zscore(staging, version) is not None, "the publish committed already"


# FLUSHALL only while the version is still staged: WATCH aborts it if the COMMIT came first.
def _flush_while_staged(probe: redis.Redis, staging: str, version: bytes) -> None:
    with probe.pipeline() as pipe:
        pipe.watch(staging)
        assert pipe.zscore(staging, version) is not None, "the publish committed already"
        pipe.multi()
        pipe.flushall()
        pipe.execute()


@pytest.mark.parametrize("loss", ["restart", "flushall"])
def test_redis_lost_its_data_while_a_catalog_version_is_published(
    own_redis: RedisServer, sid_model: SidModel, loss: str
) -> None:
    """Redis loses everything between staging and commit: restarted without persistence, or
    flushed. The upload is a 503 with `Retry-After` and a message saying the store lost its
    state and to publish again (never a 500); `current` never names a partial artifact, the
    lost version leaves no keys behind, and the retried upload succeeds."""
    settings = _catalog_settings(sid_model, own_redis.url)
    body, items = v2_catalog()
    probe = redis.Redis.from_url(own_redis.url)
    prefix = f"{NAMESPACE}:cat:{NAME}"
    url = f"{{}}/v1/catalogs/{NAME}/versions"
    headers = {"Content-Type": "application/x-ndjson"}
    with CatalogApp(settings) as catalog:
        first = httpx.post(
            url.format(catalog.url), content=sid_model.catalog_path.read_bytes(),
            headers=headers, timeout=60,
        )  # fmt: skip
        assert first.status_code == 201, first.text
        with CurrentWatcher(own_redis.url) as watcher:
            outcome: dict[str, httpx.Response] = {}

            def upload() -> None:
                outcome["lost"] = httpx.post(
                    url.format(catalog.url), content=body, headers=headers, timeout=120
                )

            publisher = threading.Thread(target=upload, daemon=True)
            publisher.start()
            staged = wait_for(
                lambda: probe.zrange(f"{prefix}:staging", 0, 0), 60, "a staged version", 0.001
            )
            lost_version = int(staged[0])
            began = time.monotonic()
            if loss == "restart":
                # Writes paused first: the publish cannot commit while the restart stops Redis.
                _pause_writes_while_staged(probe, f"{prefix}:staging", staged[0])
                own_redis.restart()  # no persistence: comes back empty
            else:
                _flush_while_staged(probe, f"{prefix}:staging", staged[0])
            publisher.join(120)
            failed_s = time.monotonic() - began
            response = outcome["lost"]
            assert response.status_code == 503, response.text
            error = response.json()["error"]
            assert error["code"] == "catalog_state_lost", error
            assert "lost" in error["message"] and "again" in error["message"], error
            assert int(response.headers["Retry-After"]) >= 1
            # Nothing of the lost version is left: no orphaned chunks or lookup tables.
            assert probe.keys(f"{prefix}:v:{lost_version}:*") == []
            assert probe.get(f"{prefix}:current") is None

            retry = httpx.post(url.format(catalog.url), content=body, headers=headers, timeout=120)
            assert retry.status_code == 201, retry.text
            assert retry.json()["activated"] is True
            version = retry.json()["version"]
        readyz = httpx.get(f"{catalog.url}/readyz", timeout=10)
        assert readyz.status_code == 200, readyz.text

    # `current` only ever named complete versions; it now names the retried upload, complete.
    assert watcher.seen and all(watcher.seen.values()), watcher.seen
    store = CatalogStore(probe, NAMESPACE)
    loaded = store.load(NAME)
    assert loaded.version == version and loaded.trie.num_items == V2_ITEMS
    assert store.item_sid(NAME, None, "v2-item-7") == items["v2-item-7"]
    print(
        f"\nredis lost its data mid-publish ({loss}): 503 {error['code']} "
        f"{failed_s:.2f} s after the loss; retried upload published v{version}"
    )
