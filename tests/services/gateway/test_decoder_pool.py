"""DecoderPool on its own (as the batch worker uses it) and the gRPC -> HTTP status table."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from tests.services.gateway.conftest import HISTORY
from tests.support.redis_server import free_port
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2 as pb
from widebeam.services.decoder.server.background import BackgroundServer
from widebeam.services.gateway.decoder_pool import DecoderPool
from widebeam.services.gateway.grpc_status import to_api_error
from widebeam.services.http.errors import ApiError


def test_pool_outside_the_app(decoder_server: BackgroundServer) -> None:
    dead = f"127.0.0.1:{free_port()}"
    seen: list[tuple[str, str, str]] = []

    async def scenario() -> None:
        pool = await DecoderPool(
            [dead, decoder_server.address], observer=lambda *a: seen.append(a)
        ).start()
        try:
            info = await pool.info()
            assert info.catalogs[0].name == "default"
            request = pb.RecommendRequest(history_item_ids=HISTORY, n=3, beam_width=4)
            for _ in range(3):
                assert len((await pool.recommend(request)).items) == 3
            with pytest.raises(ApiError) as bad:
                await pool.recommend(pb.RecommendRequest(history_item_ids=HISTORY, n=0))
            assert bad.value.status == 400 and "n must be >= 1" in bad.value.message
        finally:
            await pool.close()

    asyncio.run(scenario())
    assert (("Recommend", dead, "UNAVAILABLE")) in seen or ("GetInfo", dead, "UNAVAILABLE") in seen


def test_all_replicas_down_is_503_quickly() -> None:
    addresses = [f"127.0.0.1:{free_port()}" for _ in range(2)]

    async def scenario() -> ApiError:
        pool = await DecoderPool(
            addresses, retry_after_s=7, deadline_s=120, retry_budget_s=120
        ).start()
        try:
            with pytest.raises(ApiError) as info:
                await pool.generate(pb.GenerateRequest(input_ids=[1]))
            return info.value
        finally:
            await pool.close()

    started = time.monotonic()
    error = asyncio.run(scenario())
    # Refused connections fail at once: far sooner than the 120 s the deadline and the retry
    # budget would allow a pool that waits for a replica to come up.
    assert time.monotonic() - started < 60
    assert error.status == 503 and error.headers == {"Retry-After": "7"}


@pytest.mark.parametrize(
    ("code", "status"),
    [
        (grpc.StatusCode.INVALID_ARGUMENT, 400),
        (grpc.StatusCode.OUT_OF_RANGE, 400),
        (grpc.StatusCode.NOT_FOUND, 404),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, 429),
        (grpc.StatusCode.UNAVAILABLE, 503),
        (grpc.StatusCode.DEADLINE_EXCEEDED, 503),
        (grpc.StatusCode.CANCELLED, 503),
        (grpc.StatusCode.INTERNAL, 502),
        (grpc.StatusCode.UNKNOWN, 502),
    ],
)
def test_status_table(code: grpc.StatusCode, status: int) -> None:
    error = to_api_error(code, "details", retry_after_s=4)
    assert error.status == status
    assert ("Retry-After" in error.headers) == (status in (429, 503))
