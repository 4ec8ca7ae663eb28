"""A real decoder gRPC server on a free port, in-process, over the tiny SID model."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import empty_pb2

from tests.services.decoder.conftest import SidModel
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2 as pb
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2_grpc as pb_grpc
from widebeam.services.decoder.server.background import BackgroundServer
from widebeam.services.decoder.server.settings import DecoderSettings


def make_settings(sid_model: SidModel, **overrides: Any) -> DecoderSettings:
    fields: dict[str, Any] = {
        "model": str(sid_model.model_dir),
        "catalog_file": str(sid_model.catalog_path),
        "host": "127.0.0.1",
        "port": 0,
        "max_rows": 64,
        "max_kv_slots": 16384,
        "max_waiting": 64,
        "grace_period_s": 1.0,
    }
    return DecoderSettings(**(fields | overrides))


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(0.02)


def load(stub: pb_grpc.DecoderStub) -> pb.Load:
    return stub.GetInfo(empty_pb2.Empty(), timeout=5).load


@pytest.fixture(scope="module")
def decoder_overrides() -> dict[str, Any]:
    """The settings `server` changes from `make_settings`' (a module overrides this fixture)."""
    return {}


@pytest.fixture(scope="module")
def server(sid_model: SidModel, decoder_overrides: dict[str, Any]) -> Iterator[BackgroundServer]:
    with BackgroundServer(make_settings(sid_model, **decoder_overrides)) as srv:
        yield srv


@pytest.fixture(scope="module")
def channel(server: BackgroundServer) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(server.address) as ch:
        yield ch


@pytest.fixture(scope="module")
def stub(channel: grpc.Channel) -> pb_grpc.DecoderStub:
    return pb_grpc.DecoderStub(channel)
