"""The decoder's own request limits, met by any caller (a direct gRPC call no longer gets more
than the gateway allows): at the limit served, above it INVALID_ARGUMENT naming the field and
the setting; GetInfo reports them; the defaults refuse nothing the engine could run."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from google.protobuf import empty_pb2

from tests.services.decoder.conftest import SidModel
from tests.services.decoder.server.conftest import make_settings
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2 as pb
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2_grpc as pb_grpc
from widebeam.services.decoder.server.background import BackgroundServer
from widebeam.services.decoder.server.settings import DecoderSettings

LIMITS = {"max_beam_width": 8, "max_n": 4, "max_prompt_tokens": 12, "max_history_items": 3,
          "max_exclude_ids": 5, "max_message_bytes": 4096}  # fmt: skip


@pytest.fixture(scope="module")
def limited(sid_model: SidModel) -> Iterator[pb_grpc.DecoderStub]:
    with (
        BackgroundServer(make_settings(sid_model, **LIMITS)) as srv,
        grpc.insecure_channel(srv.address) as channel,
    ):
        yield pb_grpc.DecoderStub(channel)


def _items(sid_model: SidModel, count: int) -> list[str]:
    return [item for item, _ in sid_model.catalog[:count]]


def _invalid(call: object, request: object, message: str) -> None:
    with pytest.raises(grpc.RpcError) as info:
        call(request, timeout=30)  # type: ignore[operator]
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value.details()
    assert message in (info.value.details() or "")


def test_generate_limits(limited: pb_grpc.DecoderStub) -> None:
    at_limit = pb.GenerateRequest(input_ids=[1] * 12, beam_width=8, n=4, max_new_tokens=2)
    assert len(limited.Generate(at_limit, timeout=60).beams) == 4
    cases = {
        "beam_width 9 exceeds this decoder's max_beam_width 8": {"beam_width": 9, "n": 1},
        "n 5 exceeds this decoder's max_n 4": {"beam_width": 8, "n": 5},
        "input_ids has 13 entries; this decoder's max_prompt_tokens is 12": {"input_ids": [1] * 13},
    }
    for message, fields in cases.items():
        request = pb.GenerateRequest(input_ids=[1, 2], max_new_tokens=2)
        for name, value in fields.items():
            if name == "input_ids":
                request.input_ids[:] = value  # type: ignore[assignment]
            else:
                setattr(request, name, value)
        _invalid(limited.Generate, request, message)
    vocab = limited.GetInfo(empty_pb2.Empty(), timeout=30).vocab_size
    too_many_eos = pb.GenerateRequest(
        input_ids=[1], max_new_tokens=2, custom_eos=True, eos_token_ids=[0] * (vocab + 1)
    )
    _invalid(limited.Generate, too_many_eos, f"eos_token_ids has {vocab + 1} entries")


def test_recommend_limits(limited: pb_grpc.DecoderStub, sid_model: SidModel) -> None:
    history = _items(sid_model, 2)  # 2 SIDs of 5 tokens and the begin token: 11 tokens
    at_limit = pb.RecommendRequest(
        history_item_ids=history, n=4, beam_width=8, exclude_item_ids=_items(sid_model, 5)
    )
    assert limited.Recommend(at_limit, timeout=60).items
    cases = {
        "n 10 exceeds this decoder's max_n 4": pb.RecommendRequest(  # the default n counts
            history_item_ids=history
        ),
        "beam_width 9 exceeds this decoder's max_beam_width 8": pb.RecommendRequest(
            history_item_ids=history, n=2, beam_width=9
        ),
        "history_item_ids has 4 entries; this decoder's max_history_items is 3": (
            pb.RecommendRequest(history_item_ids=_items(sid_model, 4), n=2)
        ),
        "history_sids has 4 entries": pb.RecommendRequest(
            history_sids=[pb.Sid(codes=sid) for _, sid in sid_model.catalog[:4]], n=2
        ),
        "the history's prompt is 16 tokens; this decoder's max_prompt_tokens is 12": (
            pb.RecommendRequest(history_item_ids=_items(sid_model, 3), n=2)
        ),
        "exclude_item_ids has 6 entries; this decoder's max_exclude_ids is 5": (
            pb.RecommendRequest(
                history_item_ids=history, n=2, exclude_item_ids=_items(sid_model, 6)
            )
        ),
    }
    for message, request in cases.items():
        _invalid(limited.Recommend, request, message)


def test_messages_above_max_message_bytes_are_refused(limited: pb_grpc.DecoderStub) -> None:
    with pytest.raises(grpc.RpcError) as info:
        limited.Recommend(pb.RecommendRequest(history_item_ids=["x" * 5000]), timeout=30)
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED  # gRPC's own answer


def test_get_info_reports_the_limits(
    limited: pb_grpc.DecoderStub, stub: pb_grpc.DecoderStub
) -> None:
    got = limited.GetInfo(empty_pb2.Empty(), timeout=30).limits
    assert (got.max_beam_width, got.max_n, got.max_prompt_tokens, got.max_history_items,
            got.max_exclude_ids, got.max_message_bytes) == tuple(LIMITS.values())  # fmt: skip
    # Defaults: what the engine can run (its rows, its context, its vocabulary).
    info = stub.GetInfo(empty_pb2.Empty(), timeout=30)
    default = info.limits
    assert default.max_beam_width == default.max_n == default.max_rows == 64
    assert default.max_prompt_tokens == default.max_history_items == default.max_model_len
    assert default.max_exclude_ids == 100_000 and default.max_eos_token_ids == info.vocab_size


def test_beam_limit_above_the_rows_is_refused_at_start_up() -> None:
    with pytest.raises(ValueError, match=r"max_beam_width \(2048\) exceeds max_rows \(1024\)"):
        DecoderSettings(model="/m", max_beam_width=2048)
