"""Catalogs published through CatalogStore to a real redis-server swap in without a restart."""

from __future__ import annotations

import threading

import grpc
import redis
from google.protobuf import empty_pb2

from tests.services.decoder.conftest import SidModel
from tests.services.decoder.server.conftest import make_settings, wait_until
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
            wait_until(lambda: len(seen) >= 3, what="traffic before the publish")
            store.publish("default", SidTrie.build(items["2"], layout))
            wait_until(lambda: seen[-1].catalog.version == "2", 2.0, "the new version")
            count = len(seen)
            wait_until(lambda: len(seen) >= count + 3, what="traffic after the swap")
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
        assert server.server.catalog_sync is not None
        assert "differs from the model's" in server.server.catalog_sync.rejected["wrong"]
        response = stub.Recommend(pb.RecommendRequest(catalog="good", n=1), timeout=30)
        assert [i.item_id for i in response.items] == ["a"]
