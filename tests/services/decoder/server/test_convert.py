"""The Generate response carries every beam's fields as the engine returned them."""

from __future__ import annotations

from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2 as pb
from widebeam.services.decoder.requests.results import BeamResult, RequestOutput
from widebeam.services.decoder.server.convert import generate_response


def test_generate_response_fields() -> None:
    beams = [
        BeamResult([7, 8, 2], -0.5, -1.5, "stop", [-0.25, -0.75, -0.5], ["a", "b"]),
        BeamResult([9], -2.0, -2.0, "length"),  # no logprobs asked, unconstrained
    ]
    out = RequestOutput("r1", beams, catalog_version="v3", prompt_tokens=11, cached_prompt_tokens=8)
    response = generate_response("call-1", "books", out)
    assert response.request_id == "call-1"
    assert (response.catalog.name, response.catalog.version) == ("books", "v3")
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (11, 4)
    assert response.usage.cached_prompt_tokens == 8
    first, second = response.beams
    assert list(first.output_ids) == [7, 8, 2] and list(first.item_ids) == ["a", "b"]
    assert (first.score, first.cum_logprob) == (-0.5, -1.5)
    assert list(first.logprobs) == [-0.25, -0.75, -0.5]
    assert first.finish_reason == pb.FINISH_REASON_STOP
    assert list(second.output_ids) == [9] and not second.logprobs and not second.item_ids
    assert second.finish_reason == pb.FINISH_REASON_LENGTH


def test_generate_response_without_catalog_has_none() -> None:
    out = RequestOutput("r2", [BeamResult([1], -1.0, -1.0, "length")], prompt_tokens=3)
    response = generate_response("call-2", None, out)
    assert not response.HasField("catalog")
    assert len(response.beams) == 1


def test_generate_response_bytes_equal_a_message_built_whole() -> None:
    """The beams filled field by field serialize to the bytes of the same answer built as one
    message: no field dropped or defaulted, with and without logprobs and items."""
    beams = [
        BeamResult([7, 8, 2], -0.5, -1.5, "stop", [-0.25, -0.75, -0.5], ["a", "b"]),
        BeamResult([9], -2.0, -2.0, "length"),
        BeamResult([], 0.0, 0.0, "stop", [], []),
        BeamResult([151_000, 151_001], -0.125, -0.25, "length", None, ["c"]),
    ]
    out = RequestOutput("r3", beams, catalog_version="v9", prompt_tokens=5)
    reasons = {"stop": pb.FINISH_REASON_STOP, "length": pb.FINISH_REASON_LENGTH}
    whole = pb.GenerateResponse(
        request_id="call-3",
        usage=pb.Usage(prompt_tokens=5, completion_tokens=6),
        beams=[
            pb.Beam(
                output_ids=b.output_ids,
                score=b.score,
                cum_logprob=b.cum_logprob,
                finish_reason=reasons[b.finish_reason],
                logprobs=b.logprobs or [],
                item_ids=b.item_ids or [],
            )
            for b in beams
        ],
        catalog=pb.CatalogRef(name="books", version="v9"),
    )
    built = generate_response("call-3", "books", out)
    assert built.SerializeToString(deterministic=True) == whole.SerializeToString(
        deterministic=True
    )
