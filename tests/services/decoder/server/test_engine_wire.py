"""The API processes' wire: outputs survive the column encoding exactly, errors keep their
class and message, frames round-trip over a real stream."""

from __future__ import annotations

import asyncio
import random

import pytest

from widebeam.services.decoder.requests.results import BeamResult, RequestOutput
from widebeam.services.decoder.requests.spec import GenerationRequest, RequestError
from widebeam.services.decoder.server.async_types import EngineFailure, Overloaded, ShuttingDown
from widebeam.services.decoder.server.engine_wire import (
    Kind,
    decode_error,
    decode_output,
    encode_error,
    encode_output,
    frame,
    read_message,
)


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


def test_frames_round_trip_over_a_stream() -> None:
    async def run() -> list[tuple[Kind, int, object]]:
        reader = asyncio.StreamReader()
        request = GenerationRequest("r", tuple(range(5000)), beam_width=4, n=2)
        reader.feed_data(frame(Kind.GENERATE, 1, (request, 2.5)) + frame(Kind.ABORT, 1, None))
        reader.feed_eof()
        got = [await read_message(reader), await read_message(reader)]
        with pytest.raises(asyncio.IncompleteReadError):
            await read_message(reader)
        return got

    first, second = asyncio.run(run())
    assert first[0] is Kind.GENERATE and first[1] == 1 and first[2][0].input_ids[-1] == 4999
    assert second == (Kind.ABORT, 1, None)
