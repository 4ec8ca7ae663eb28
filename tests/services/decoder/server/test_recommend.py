"""Recommend: distinct catalog items, best first, exclusions respected, clear errors."""

from __future__ import annotations

import grpc
import pytest

from tests.services.decoder.conftest import SidModel
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2 as pb
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2_grpc as pb_grpc
from widebeam.services.decoder.server.background import BackgroundServer

HISTORY = ["item-3", "item-17", "item-42"]


def recommend(stub: pb_grpc.DecoderStub, **fields: object) -> pb.RecommendResponse:
    return stub.Recommend(pb.RecommendRequest(**fields), timeout=30)


def test_returns_n_distinct_catalog_items(stub: pb_grpc.DecoderStub, sid_model: SidModel) -> None:
    sid_of = dict(sid_model.catalog)
    response = recommend(stub, history_item_ids=HISTORY, n=10, beam_width=16)
    ids = [item.item_id for item in response.items]
    assert len(ids) == len(set(ids)) == 10 and not response.exhausted
    for item in response.items:
        assert tuple(item.sid.codes) == sid_of[item.item_id]
    scores = [item.score for item in response.items]
    assert scores == sorted(scores, reverse=True)
    assert response.catalog.name == "default" and response.catalog.version.startswith("file-")
    assert response.beams_returned == 16
    assert response.usage.prompt_tokens == 5 * len(HISTORY) + 1  # [b c c c e] per item + b
    assert response.usage.completion_tokens == 16 * 4  # c c c e per beam


def test_exclusions_are_respected(stub: pb_grpc.DecoderStub) -> None:
    first = [i.item_id for i in recommend(stub, history_item_ids=HISTORY, n=5, beam_width=16).items]
    again = recommend(stub, history_item_ids=HISTORY, n=5, beam_width=16, exclude_item_ids=first)
    assert len(again.items) == 5 and not {i.item_id for i in again.items} & set(first)


def test_too_many_exclusions_say_exhausted(stub: pb_grpc.DecoderStub) -> None:
    first = [i.item_id for i in recommend(stub, history_item_ids=HISTORY, n=4, beam_width=4).items]
    again = recommend(stub, history_item_ids=HISTORY, n=4, beam_width=4, exclude_item_ids=first)
    assert again.exhausted and len(again.items) < 4
    assert not {i.item_id for i in again.items} & set(first)


def test_history_as_sids_equals_history_as_items(
    stub: pb_grpc.DecoderStub, sid_model: SidModel
) -> None:
    sid_of = dict(sid_model.catalog)
    by_items = recommend(stub, history_item_ids=HISTORY, n=6, beam_width=8)
    sids = [pb.Sid(codes=sid_of[i]) for i in HISTORY]
    by_sids = recommend(stub, history_sids=sids, n=6, beam_width=8)
    assert list(by_items.items) == list(by_sids.items)


def test_empty_history_starts_from_the_begin_token(stub: pb_grpc.DecoderStub) -> None:
    response = recommend(stub, n=3)
    assert len(response.items) == 3 and response.usage.prompt_tokens == 1


def test_unknown_items_are_named_or_skipped(stub: pb_grpc.DecoderStub) -> None:
    history = ["item-3", "ghost-1", "item-5", "ghost-2"]
    with pytest.raises(grpc.RpcError) as info:
        recommend(stub, history_item_ids=history, n=3, beam_width=4)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "'ghost-1', 'ghost-2'" in info.value.details()
    skipped = recommend(stub, history_item_ids=history, n=3, beam_width=4, skip_unknown_items=True)
    assert list(skipped.skipped_history_item_ids) == ["ghost-1", "ghost-2"]
    assert skipped.usage.prompt_tokens == 11 and len(skipped.items) == 3


def test_a_history_that_does_not_map_never_reaches_the_engine(
    server: BackgroundServer, stub: pb_grpc.DecoderStub
) -> None:
    counts = server.server.engine.engine.step_counts
    recommend(stub, history_item_ids=HISTORY, n=2, beam_width=4)
    taken = counts.inbox_requests
    assert taken >= 1
    for _ in range(5):  # a hostile client: its refusals cost the engine thread nothing
        with pytest.raises(grpc.RpcError) as info:
            recommend(stub, history_item_ids=["ghost-1"], n=2, beam_width=4)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert counts.inbox_requests == taken  # refused before the inbox


BAD = [
    (dict(n=5, beam_width=4), "n must be in 1..beam_width (4), got 5"),
    (dict(n=0), "n must be >= 1"),
    (dict(history_item_ids=["item-1"], history_sids=[pb.Sid(codes=[1, 2, 3])]), "not both"),
    (dict(history_sids=[pb.Sid(codes=[1, 2])]), "has 2 codes; the layout has 3"),
    (dict(history_sids=[pb.Sid(codes=[1, 2, 99])]), "code 99 out of range"),
    (dict(history_item_ids=["item-1", ""]), "empty ids at positions [1]"),
    (dict(catalog="nope"), "unknown catalog 'nope'; loaded: default"),
    (dict(n=2, beam_width=65), "exceeds this engine's max_rows"),
]


@pytest.mark.parametrize(("fields", "message"), BAD)
def test_bad_recommend_is_invalid_argument(
    stub: pb_grpc.DecoderStub, fields: dict, message: str
) -> None:
    with pytest.raises(grpc.RpcError) as info:
        recommend(stub, **fields)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in info.value.details()
