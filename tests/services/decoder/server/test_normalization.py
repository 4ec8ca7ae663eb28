"""`normalization` over gRPC: the enum's conversion, its errors, and what "sid" does to scores."""

from __future__ import annotations

import grpc
import pytest

from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2 as pb
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2_grpc as pb_grpc
from widebeam.services.decoder.requests.spec import RequestError
from widebeam.services.decoder.server.convert import generation_request
from widebeam.services.decoder.server.recommend import parse_recommend

HISTORY = ["item-3", "item-17", "item-42"]
# Sums of fp32 log-probs from two separately batched runs: equal paths may differ by rounding.
TOLERANCE = 1e-4
CONSTRAINED = dict(
    input_ids=[1, 2, 3, 4], beam_width=16, n=16, max_new_tokens=5, constrained=True,
    return_logprobs=True,
)  # fmt: skip


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (pb.NORMALIZATION_UNSPECIFIED, "vocab"),
        (pb.NORMALIZATION_VOCAB, "vocab"),
        (pb.NORMALIZATION_SID, "sid"),
    ],
)
def test_each_enum_value_converts(value: int, expected: str) -> None:
    generate = pb.GenerateRequest(input_ids=[1], constrained=True, normalization=value)
    assert generation_request(generate).normalization == expected
    assert parse_recommend(pb.RecommendRequest(normalization=value)).normalization == expected


def test_an_unknown_enum_value_is_a_request_error() -> None:
    with pytest.raises(RequestError, match="normalization: unknown enum value 7"):
        generation_request(pb.GenerateRequest(input_ids=[1], normalization=7))
    with pytest.raises(RequestError, match="normalization: unknown enum value 7"):
        parse_recommend(pb.RecommendRequest(normalization=7))


@pytest.mark.parametrize(
    ("rpc", "rpc_request", "message"),
    [
        (
            "Generate",
            pb.GenerateRequest(input_ids=[1, 2], normalization=pb.NORMALIZATION_SID),
            'normalization "sid" needs a constrained request',
        ),
        (
            "Generate",
            pb.GenerateRequest(input_ids=[1, 2], normalization=9),
            "normalization: unknown enum value 9",
        ),
        (
            "Recommend",
            pb.RecommendRequest(history_item_ids=HISTORY, n=2, normalization=9),
            "normalization: unknown enum value 9",
        ),
    ],
)
def test_bad_normalization_is_invalid_argument(
    stub: pb_grpc.DecoderStub, rpc: str, rpc_request: object, message: str
) -> None:
    with pytest.raises(grpc.RpcError) as info:
        getattr(stub, rpc)(rpc_request, timeout=30)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in info.value.details()


def test_sid_normalization_only_raises_log_probs(stub: pb_grpc.DecoderStub) -> None:
    """A log-softmax over a subset of the tokens is >= the one over all of them, token by token;
    the tiny model gives the non-SID tokens real mass, so some beam must rise strictly."""
    vocab = stub.Generate(pb.GenerateRequest(**CONSTRAINED), timeout=60)
    sid = stub.Generate(
        pb.GenerateRequest(**CONSTRAINED, normalization=pb.NORMALIZATION_SID), timeout=60
    )
    assert len(sid.beams) == len(vocab.beams) > 0
    # Compared path by path: beam search is not exhaustive, so the two may keep other paths.
    by_path = {tuple(b.output_ids): b for b in vocab.beams}
    shared = [
        (b, by_path[tuple(b.output_ids)]) for b in sid.beams if tuple(b.output_ids) in by_path
    ]
    assert shared, "no beam found by both normalizations"
    for s, v in shared:
        assert s.cum_logprob >= v.cum_logprob - TOLERANCE
        assert all(a >= b - TOLERANCE for a, b in zip(s.logprobs, v.logprobs, strict=True))
    assert any(s.cum_logprob > v.cum_logprob + TOLERANCE for s, v in shared)


def test_recommend_passes_normalization_to_the_engine(stub: pb_grpc.DecoderStub) -> None:
    def scores(normalization: int) -> dict[str, float]:
        response = stub.Recommend(
            pb.RecommendRequest(
                history_item_ids=HISTORY, n=8, beam_width=16, normalization=normalization
            ),
            timeout=60,
        )
        return {item.item_id: item.score for item in response.items}

    vocab, sid = scores(pb.NORMALIZATION_VOCAB), scores(pb.NORMALIZATION_SID)
    shared = set(vocab) & set(sid)
    assert shared and all(sid[i] >= vocab[i] - TOLERANCE for i in shared)
    assert any(sid[i] > vocab[i] + TOLERANCE for i in shared)
