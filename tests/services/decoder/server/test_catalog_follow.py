"""Catalogs published through CatalogStore to a real redis-server swap in without a restart."""

from __future__ import annotations

import threading

import grpc
import redis
from google.protobuf import empty_pb2

from tests.services.decoder.conftest import SidModel
from tests.services.decoder.server.conftest import make_settings, wait_until
from tests.support.held_relay import HeldRelay
from tests.support.redis_server import RedisServer
from widebeam.services.catalog.sid_layout import SidLayout
from widebeam.services.catalog.store import CatalogStore
from widebeam.services.catalog.trie import SidTrie
from widebeam.services.catalog.types import CatalogEntry
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2 as pb
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2_grpc as pb_grpc
from widebeam.services.decoder.server.background import BackgroundServer


def test_new_versions_are_picked_up_while_requests_flow(
    sid_model: SidModel, redis_url: str, redis_client: redis.Redis
) -> None:
    layout = SidLayout.from_tokenizer(sid_model.model_dir)
    assert layout is not None
    store = CatalogStore(redis_client)
    items = {
        "1": [CatalogEntry(item, sid) for item, sid in sid_model.catalog],
        "2": [CatalogEntry(f"v2-{item}", sid) for item, sid in sid_model.catalog[::2]],
    }
    store.publish("default", SidTrie.build(items["1"], layout))
    settings = make_settings(sid_model, catalog_file=None, redis_url=redis_url)
    request = pb.RecommendRequest(history_sids=[pb.Sid(codes=sid_model.catalog[0][1])], n=8)
    with BackgroundServer(settings) as server, grpc.insecure_channel(server.address) as channel:
        stub = pb_grpc.DecoderStub(channel)
        assert stub.Recommend(request, timeout=30).catalog.version == "1"
        seen: list[pb.RecommendResponse] = []
        stop = threading.Event()

        def traffic() -> None:
            while not stop.is_set():
                seen.append(stub.Recommend(request, timeout=30))  # any failure fails the test

        thread = threading.Thread(target=traffic)
        thread.start()
        try:
            wait_until(lambda: len(seen) >= 3, 60.0, "traffic before the publish")
            store.publish("default", SidTrie.build(items["2"], layout))
            wait_until(lambda: seen[-1].catalog.version == "2", 60.0, "the new version")
            count = len(seen)
            wait_until(lambda: len(seen) >= count + 3, 60.0, "traffic after the swap")
        finally:
            stop.set()
            thread.join(30)
        names = {version: {e.item_id for e in entries} for version, entries in items.items()}
        for response in seen:  # every response's items belong to the version it reports
            assert {i.item_id for i in response.items} <= names[response.catalog.version]
            assert len(response.items) == 8
        versions = [r.catalog.version for r in seen]
        assert versions == sorted(versions)  # never back to the old version
        info = stub.GetInfo(empty_pb2.Empty(), timeout=5)
        assert [(c.name, c.version, c.num_items) for c in info.catalogs] == [("default", "2", 150)]


def test_catalog_with_another_layout_is_not_served(
    sid_model: SidModel, redis_url: str, redis_client: redis.Redis
) -> None:
    store = CatalogStore(redis_client)
    layout = SidLayout.from_tokenizer(sid_model.model_dir)
    assert layout is not None
    store.publish("good", SidTrie.build([CatalogEntry("a", (1, 2, 3))], layout))
    wrong = SidLayout.parse("0:16,16:16,32:16")
    store.publish("wrong", SidTrie.build([CatalogEntry("a", (1, 2, 3))], wrong))
    settings = make_settings(sid_model, catalog_file=None, redis_url=redis_url)
    with BackgroundServer(settings) as server, grpc.insecure_channel(server.address) as channel:
        stub = pb_grpc.DecoderStub(channel)
        info = stub.GetInfo(empty_pb2.Empty(), timeout=5)
        assert [c.name for c in info.catalogs] == ["good"]
        sync = server.server.catalog_sync
        assert sync is not None
        # (each catalog is looked at on its own: "good" may be served before "wrong" is judged)
        wait_until(lambda: "wrong" in sync.rejected, 60, "the wrong layout's rejection")
        assert "differs from the model's" in sync.rejected["wrong"]
        info = stub.GetInfo(empty_pb2.Empty(), timeout=5)
        assert [c.name for c in info.catalogs] == ["good"]  # and still not served
        response = stub.Recommend(pb.RecommendRequest(catalog="good", n=1), timeout=30)
        assert [i.item_id for i in response.items] == ["a"]


def test_the_old_version_answers_until_the_new_one_is_loaded(
    sid_model: SidModel, redis_server: RedisServer, redis_url: str, redis_client: redis.Redis
) -> None:
    """The decoder reaches Redis through a relay the test holds: the new version is made
    current, and the decoder hears of it (or sees `current` move) but cannot read it until the
    test has its answers and releases the relay, as a load that takes that long would. (A
    `CLIENT PAUSE` of fixed length did this before; it cannot be ended early, since an UNPAUSE
    waits out the pause too, so every run waited all of it, 20 s.)"""
    layout = SidLayout.from_tokenizer(sid_model.model_dir)
    assert layout is not None
    store = CatalogStore(redis_client)
    old = [CatalogEntry(item, sid) for item, sid in sid_model.catalog]
    new = [CatalogEntry(f"v2-{item}", sid) for item, sid in sid_model.catalog]
    store.publish("default", SidTrie.build(old, layout))
    store.publish("default", SidTrie.build(new, layout), activate=False)  # complete, not current
    history = [item for item, _ in sid_model.catalog[:3]]  # items of the old version only
    request = pb.RecommendRequest(history_item_ids=history, n=4)
    with HeldRelay(redis_server.port) as relay:
        relayed_url = f"redis://127.0.0.1:{relay.port}/0"
        assert redis_url == redis_server.url  # the relay stands in for this URL, db 0
        settings = make_settings(sid_model, catalog_file=None, redis_url=relayed_url)
        with (
            BackgroundServer(settings) as server,
            grpc.insecure_channel(server.address) as channel,
        ):
            stub = pb_grpc.DecoderStub(channel)
            assert stub.Recommend(request, timeout=30).catalog.version == "1"
            relay.hold()
            store.activate("default", 2)  # the test's own client goes to Redis directly
            assert store.current_version("default") == 2
            # The decoder is waiting on Redis now (it polls the catalog events with a blocking
            # read of 1 s, so it is at once, and almost always its read of the new `current`).
            relay.wait_holding(60)
            for _ in range(3):  # answered while the new version cannot be read
                response = stub.Recommend(request, timeout=30)
                assert response.catalog.version == "1"
                assert [i.item_id for i in response.items]
                assert not response.skipped_history_item_ids
            info = stub.GetInfo(empty_pb2.Empty(), timeout=30)
            assert [(c.name, c.version) for c in info.catalogs] == [("default", "1")]
            # The hold ends, the decoder reads the new version and swaps it in; the old
            # version's items are unknown to it, so the same request now skips them (and
            # still answers).
            relay.release()
            wait_until(
                lambda: stub.GetInfo(empty_pb2.Empty(), timeout=30).catalogs[0].version == "2",
                120,
                "the new version after the hold",
            )
            response = stub.Recommend(
                pb.RecommendRequest(history_item_ids=history, n=4, skip_unknown_items=True),
                timeout=30,
            )
            assert response.catalog.version == "2"
            assert list(response.skipped_history_item_ids) == history
            assert all(i.item_id.startswith("v2-") for i in response.items)
