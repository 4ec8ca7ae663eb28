"""Generate over gRPC returns exactly what the engine returns; bad input is INVALID_ARGUMENT."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import grpc
import pytest

from tests.services.decoder.conftest import SidModel
from widebeam.services.decoder.config import EngineConfig
from widebeam.services.decoder.engine import Engine
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2 as pb
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2_grpc as pb_grpc
from widebeam.services.decoder.requests.spec import GenerationRequest
from widebeam.services.decoder.server.convert import generation_request

CASES = [
    pb.GenerateRequest(input_ids=[5, 6, 7], beam_width=8, n=3, max_new_tokens=6),
    pb.GenerateRequest(
        input_ids=[1, 2, 3, 4], beam_width=6, n=6, max_new_tokens=5, constrained=True,
        return_logprobs=True,
    ),
    pb.GenerateRequest(input_ids=[9], max_new_tokens=7, return_logprobs=True),
    pb.GenerateRequest(input_ids=[9, 10], temperature=0.8, top_k=20, seed=3, max_new_tokens=6),
    pb.GenerateRequest(
        input_ids=[3, 3, 3], beam_width=4, n=2, max_new_tokens=4, length_penalty=0.5,
        early_stopping=pb.EARLY_STOPPING_NEVER, custom_eos=True, eos_token_ids=[7, 8],
    ),
    pb.GenerateRequest(
        input_ids=[11, 12], beam_width=5, n=2, max_new_tokens=3, custom_eos=True, ignore_eos=True,
    ),
]  # fmt: skip


@pytest.fixture(scope="module")
def reference(sid_model: SidModel) -> Engine:
    return Engine(
        EngineConfig(
            model_dir=str(sid_model.model_dir),
            catalog_path=str(sid_model.catalog_path),
            max_rows=64,
            max_kv_slots=16384,
        )
    )


def test_generate_equals_engine(stub: pb_grpc.DecoderStub, reference: Engine) -> None:
    with ThreadPoolExecutor(len(CASES)) as pool:  # concurrent: they share the server's batches
        responses = list(pool.map(lambda r: stub.Generate(r, timeout=60), CASES))
    expected = reference.generate(
        [replace(generation_request(r), request_id=str(i)) for i, r in enumerate(CASES)]
    )
    for case, got, want in zip(CASES, responses, expected, strict=True):
        assert want.ok and len(got.beams) == len(want.beams) > 0
        for g, w in zip(got.beams, want.beams, strict=True):
            assert list(g.output_ids) == w.output_ids
            assert g.score == pytest.approx(w.score, rel=1e-5, abs=1e-6)
            assert g.cum_logprob == pytest.approx(w.cum_logprob, rel=1e-5, abs=1e-6)
            reason = pb.FINISH_REASON_STOP if w.finish_reason == "stop" else pb.FINISH_REASON_LENGTH
            assert g.finish_reason == reason
            assert list(g.item_ids) == (w.item_ids or [])
            assert list(g.logprobs) == pytest.approx(w.logprobs or [], rel=1e-5, abs=1e-6)
        assert got.usage.prompt_tokens == len(case.input_ids)
        assert got.usage.completion_tokens == sum(len(b.output_ids) for b in want.beams)
        if case.constrained:
            assert got.catalog.name == "default"
            assert got.catalog.version == want.catalog_version
        else:
            assert not got.HasField("catalog")


def test_request_id_is_echoed(stub: pb_grpc.DecoderStub) -> None:
    response = stub.Generate(pb.GenerateRequest(request_id="abc", input_ids=[1]), timeout=30)
    assert response.request_id == "abc" and len(response.beams) == 1


BAD = [
    (dict(beam_width=0), "beam_width must be an integer >= 1, got 0"),
    (dict(beam_width=4, n=5), "n must be in 1..beam_width (4), got 5"),
    (dict(input_ids=[]), "input_ids is empty"),
    (dict(input_ids=[1, -4]), "outside the vocabulary"),
    (dict(input_ids=[1, 1 << 40]), "outside the vocabulary"),
    (dict(max_new_tokens=0), "max_new_tokens must be >= 1"),
    (dict(max_new_tokens=2_000_000_000), "exceeds the context length"),
    (dict(beam_width=65), "exceeds this engine's max_rows 64"),
    (dict(beam_width=64, n=1, max_new_tokens=1000), "KV slots"),
    (dict(constrained=True, catalog="nope", max_new_tokens=5), "unknown catalog 'nope'"),
    (dict(constrained=True, max_new_tokens=2), "needs max_new_tokens >= 5"),
    (dict(eos_token_ids=[3]), "eos_token_ids given without custom_eos=true"),
    (dict(custom_eos=True, eos_token_ids=[10_000]), "eos_token_id outside the vocabulary"),
    (dict(early_stopping=42), "early_stopping: unknown enum value 42"),
    (dict(temperature=-1.0), "temperature must be >= 0"),
    (dict(top_p=1.5), "top_p must be in (0, 1]"),
    (dict(temperature=0.5, beam_width=2), "needs beam_width 1"),
    (dict(length_penalty=float("nan")), "length_penalty must be a number in"),
]


@pytest.mark.parametrize(("fields", "message"), BAD)
def test_bad_input_is_invalid_argument(
    stub: pb_grpc.DecoderStub, fields: dict, message: str
) -> None:
    request = pb.GenerateRequest(**({"input_ids": [1, 2, 3], "max_new_tokens": 4} | fields))
    with pytest.raises(grpc.RpcError) as info:
        stub.Generate(request, timeout=30)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in info.value.details()
    # ...and the server keeps serving.
    assert len(stub.Generate(pb.GenerateRequest(input_ids=[1]), timeout=30).beams) == 1


def test_unset_optionals_take_engine_defaults() -> None:
    spec = generation_request(pb.GenerateRequest(input_ids=[1]))
    assert spec == GenerationRequest(request_id="", input_ids=(1,))
