"""Bad requests get a clear error and disturb nothing; good requests in the same batch run."""

from __future__ import annotations

import pytest

from tests.services.decoder.conftest import SidModel
from widebeam.services.decoder.config import EngineConfig
from widebeam.services.decoder.engine import Engine
from widebeam.services.decoder.requests.parsing import request_from_dict
from widebeam.services.decoder.requests.spec import GenerationRequest, RequestError


@pytest.fixture(scope="module")
def engine(sid_model: SidModel) -> Engine:
    return sid_model.engine(max_rows=64, max_kv_slots=2048, max_model_len=64)


@pytest.fixture(scope="module")
def plain_engine(sid_model: SidModel) -> Engine:
    return Engine(EngineConfig(model_dir=str(sid_model.model_dir)))


BAD = [
    (dict(n=5, beam_width=4), "n must be in 1..beam_width"),
    (dict(beam_width=65, n=1), "exceeds this engine's max_rows"),
    (dict(beam_width=0), "beam_width must be an integer >= 1"),
    (dict(input_ids=()), "input_ids is empty"),
    (dict(input_ids=(1, 10_000)), "outside the vocabulary"),
    (dict(input_ids=(-1,)), "outside the vocabulary"),
    (dict(max_new_tokens=0), "max_new_tokens must be >= 1"),
    (dict(max_new_tokens=60, input_ids=tuple(range(10))), "exceeds the context length 64"),
    (dict(min_new_tokens=9, max_new_tokens=3), "min_new_tokens must be in"),
    (dict(early_stopping="sometimes"), "early_stopping must be"),
    (dict(length_penalty=2.0**40), "length_penalty must be a number in"),
    (dict(length_penalty=float("nan")), "length_penalty must be a number in"),
    (dict(temperature=-1.0), "temperature must be >= 0"),
    (dict(temperature=0.7, beam_width=4, n=1), "sampling (temperature > 0) needs beam_width 1"),
    (dict(top_p=0.0), "top_p must be in (0, 1]"),
    (dict(eos_token_id=(99999,)), "eos_token_id outside the vocabulary"),
    (dict(beam_width=64, n=1, max_new_tokens=63, input_ids=(1,)), "KV slots"),
    (dict(constrained=True, max_new_tokens=2), "needs max_new_tokens >= 5"),
    (dict(constrained=True, max_new_tokens=7, eos_token_id=()), "without EOS"),
    (dict(constrained=True, max_new_tokens=7, min_new_tokens=6), "min_new_tokens <= 5"),
]


@pytest.mark.parametrize("overrides,message", BAD)
def test_bad_request_is_rejected_with_clear_message(
    engine: Engine, overrides: dict, message: str
) -> None:
    fields = dict(request_id="bad", input_ids=(1, 2, 3), max_new_tokens=4) | overrides
    with pytest.raises(RequestError, match=message.replace("(", r"\(").replace(")", r"\)")):
        engine.submit(GenerationRequest(**fields))
    assert not engine.has_unfinished()


def test_constrained_without_catalog(plain_engine: Engine) -> None:
    with pytest.raises(RequestError, match="no catalog is loaded"):
        plain_engine.submit(GenerationRequest("c", (1, 2), max_new_tokens=5, constrained=True))


def test_errors_do_not_disturb_other_requests(engine: Engine) -> None:
    good = GenerationRequest("good", (1, 2, 3), beam_width=4, n=2, max_new_tokens=3)
    outputs = engine.generate(
        [
            GenerationRequest("bad", (1, 2, 3), beam_width=4, n=9),
            good,
            GenerationRequest("good", (4,)),
        ]
    )
    assert "n must be" in outputs[0].error
    assert outputs[1].error is None and len(outputs[1].beams) == 2
    assert outputs[2].error == "duplicate request id"
    assert outputs[1].beams == engine.generate([good])[0].beams


@pytest.mark.parametrize(
    "data,message",
    [
        ([1, 2], "must be a JSON object"),
        ({"input_ids": [1]}, "id is required"),
        ({"id": "x", "input_ids": "1 2"}, "input_ids must be a list"),
        ({"id": "x", "input_ids": [1], "beam_width": 2.5}, "beam_width must be an integer"),
        ({"id": "x", "input_ids": [1], "constrained": 1}, "constrained must be true or false"),
        ({"id": "x", "input_ids": [1], "eos_token_id": "a"}, "eos_token_id must be"),
        ({"id": "x", "input_ids": [1], "beams": 3}, "unknown field"),
    ],
)
def test_request_parsing_errors(data: object, message: str) -> None:
    with pytest.raises(RequestError, match=message):
        request_from_dict(data)


def test_request_parsing_accepts_all_fields() -> None:
    req = request_from_dict(
        {
            "id": 7,
            "input_ids": [1, 2],
            "beam_width": 4,
            "n": 2,
            "max_new_tokens": 5,
            "min_new_tokens": 1,
            "length_penalty": 2,
            "early_stopping": "never",
            "eos_token_id": 3,
            "ignore_eos": False,
            "constrained": True,
            "temperature": None,
            "top_p": 0.5,
            "top_k": 4,
            "seed": 1,
            "return_logprobs": True,
        }
    )
    assert req.request_id == "7" and req.eos_token_id == (3,) and req.length_penalty == 2.0
    assert req.early_stopping == "never" and req.return_logprobs


def test_unknown_catalog_name(engine: Engine) -> None:
    req = GenerationRequest("u", (1, 2), max_new_tokens=5, constrained=True, catalog="books")
    with pytest.raises(RequestError, match="unknown catalog 'books'; loaded: default"):
        engine.submit(req)
