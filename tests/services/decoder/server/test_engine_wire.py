"""The API processes' wire: outputs survive the column encoding exactly, requests and the
engine's description survive their codecs field for field, errors keep their class and
message, frames round-trip over a real stream."""

from __future__ import annotations

import asyncio
import random

import pytest

from widebeam.services.catalog.sid_layout import SidLayout
from widebeam.services.decoder.requests.results import BeamResult, RequestOutput
from widebeam.services.decoder.requests.spec import (
    GenerationRequest,
    Normalization,
    RequestError,
)
from widebeam.services.decoder.server.async_types import EngineFailure, Overloaded, ShuttingDown
from widebeam.services.decoder.server.engine_handle import ServerInfo
from widebeam.services.decoder.server.engine_wire import (
    Kind,
    decode_error,
    decode_output,
    encode_error,
    encode_output,
    frame,
    generate_body,
    generate_from,
    hello_body,
    hello_from,
    read_message,
    recommend_body,
    recommend_from,
    recommended_body,
    recommended_from,
)
from widebeam.services.decoder.server.recommend import RecommendAnswer, RecommendSpec
from widebeam.services.decoder.server.request_limits import RequestLimits

LAYOUT = SidLayout.parse("200:8,208:8,216:8;begin=224;end=225")


def random_output(rng: random.Random, beams: int, logprobs: bool, items: bool) -> RequestOutput:
    results = []
    for _ in range(beams):
        length = rng.randint(0, 6)
        tokens = [rng.randrange(1 << 40) for _ in range(length)]
        results.append(
            BeamResult(
                tokens,
                rng.uniform(-50, 0),
                rng.uniform(-80, 0),
                rng.choice(["stop", "length"]),
                [rng.uniform(-9, 0) for _ in tokens] if logprobs else None,
                [f"item-{rng.randrange(10**6)}\u00e9" for _ in range(rng.randint(0, 3))]
                if items
                else None,
            )
        )
    return RequestOutput(
        request_id=f"req-{rng.randrange(100)}",
        beams=results,
        catalog_version=rng.choice([None, "v7"]),
        prompt_tokens=rng.randrange(5000),
        cached_prompt_tokens=rng.randrange(100),
    )


@pytest.mark.parametrize("seed", range(12))
def test_outputs_round_trip_exactly(seed: int) -> None:
    rng = random.Random(seed)
    out = random_output(rng, rng.choice([0, 1, 7, 300]), rng.random() < 0.5, rng.random() < 0.5)
    assert decode_output(encode_output(out)) == out
    assert decode_output(_wire(encode_output(out))) == out  # type: ignore[arg-type]


def test_errors_keep_their_class_message_and_retry_after() -> None:
    errors: list[BaseException] = [
        RequestError("n must be >= 1"),
        Overloaded("shed at once", 3),
        Overloaded("queue full"),
        ShuttingDown("stopping"),
        TimeoutError("deadline"),
        EngineFailure("step failed"),
    ]
    for error in errors:
        back = decode_error(encode_error(error))
        assert type(back) is type(error) and str(back) == str(error)
        if isinstance(error, Overloaded):
            assert isinstance(back, Overloaded) and back.retry_after_s == error.retry_after_s
    unexpected = decode_error(encode_error(KeyError("x")))
    assert isinstance(unexpected, EngineFailure) and "KeyError" in str(unexpected)


def _wire(body: object) -> object:
    """`body` as the other process reads it: framed, then read back."""

    async def run() -> object:
        reader = asyncio.StreamReader()
        reader.feed_data(frame(Kind.GENERATE, 1, body))
        reader.feed_eof()
        return (await read_message(reader))[2]

    return asyncio.run(run())


@pytest.mark.parametrize(
    "request_",
    [
        GenerationRequest("r", tuple(range(5000)), beam_width=4, n=2),
        GenerationRequest(
            "s", (1, 2), beam_width=8, n=8, max_new_tokens=5, early_stopping="never",
            eos_token_id=(), constrained=True, catalog="shop", return_logprobs=True,
            normalization=Normalization.SID, temperature=0.7, top_p=0.9, top_k=5, seed=3,
        ),
        GenerationRequest("t", (9,), eos_token_id=(4, 5), early_stopping=True, ignore_eos=True),
    ],
)  # fmt: skip
def test_generation_requests_survive_the_wire(request_: GenerationRequest) -> None:
    assert generate_from(_wire(generate_body(request_, 2.5))) == (request_, 2.5)
    assert generate_from(_wire(generate_body(request_, None))) == (request_, None)


def test_recommend_specs_and_answers_survive_the_wire() -> None:
    spec = RecommendSpec(
        catalog="shop", n=3, beam_width=8, history_items=("a", "b\u00e9"),
        history_sids=((1, 2, 3), (4, 5, 6)), exclude=frozenset({"x", "y"}), skip_unknown=True,
        length_penalty=0.5, normalization=Normalization.SID,
    )  # fmt: skip
    assert recommend_from(_wire(recommend_body(spec, 1.0))) == (spec, 1.0)
    out = random_output(random.Random(1), 5, False, True)
    answer = RecommendAnswer(spec, out, "shop", "v3", LAYOUT, ("gone",))
    assert recommended_from(spec, _wire(recommended_body(answer))) == answer


def test_the_engine_description_survives_the_wire() -> None:
    limits = RequestLimits(64, 32, 4096, 500, 100, 1000, "engine's max_rows")
    for layout in (LAYOUT, None):
        info = ServerInfo("/m", "qwen3", layout, "cpu", "float32", 1 << 24, limits)
        assert hello_from(_wire(hello_body(info))) == info


def test_frames_round_trip_over_a_stream() -> None:
    async def run() -> list[tuple[Kind, int, object]]:
        reader = asyncio.StreamReader()
        reader.feed_data(frame(Kind.INFO_REPLY, 7, b"\x00\xff") + frame(Kind.ABORT, 1, None))
        reader.feed_eof()
        got = [await read_message(reader), await read_message(reader)]
        with pytest.raises(asyncio.IncompleteReadError):
            await read_message(reader)
        return got

    first, second = asyncio.run(run())
    assert first == (Kind.INFO_REPLY, 7, b"\x00\xff")
    assert second == (Kind.ABORT, 1, None)
