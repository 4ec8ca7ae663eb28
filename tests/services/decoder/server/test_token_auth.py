"""The decoder's bearer token: a real server, every RPC without / with a wrong / with the right
token; health stays open for probes; the token comes from the environment or a file, never
from a flag."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf import empty_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from tests.services.decoder.conftest import SidModel
from tests.services.decoder.server.conftest import make_settings
from widebeam.cli import build_parser
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2 as pb
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2_grpc as pb_grpc
from widebeam.services.decoder.security.client import ChannelSecurity, DecoderClientSettings
from widebeam.services.decoder.server.background import BackgroundServer
from widebeam.services.decoder.server.cli import settings_from_args
from widebeam.services.decoder.server.settings import DecoderSettings

TOKEN = "dec-T0ken-4f1c9a7e2b"
GENERATE = pb.GenerateRequest(input_ids=[1, 2, 3], max_new_tokens=2)
RECOMMEND = pb.RecommendRequest(history_item_ids=["item-1", "item-2"], n=2)
# Metadata a caller might send instead of the right `authorization: Bearer TOKEN`.
WRONG_METADATA = [
    (),
    (("authorization", "Bearer dec-T0ken-4f1c9a7e2X"),),  # one character off
    (("authorization", f"Bearer {TOKEN}x"),),  # the token is a prefix of it
    (("authorization", f"Bearer {TOKEN[:-1]}"),),  # a prefix of the token
    (("authorization", TOKEN),),  # no scheme
    (("authorization", f"Basic {TOKEN}"),),
    (("authorization", "Bearer "),),
    (("authorization", f"Bearer {TOKEN}"), ("authorization", "Bearer other-token-000000")),
    (("x-api-key", TOKEN),),
]


@pytest.fixture(scope="module", params=[0, 1], ids=["port-in-engine", "api-process"])
def locked(sid_model: SidModel, request: pytest.FixtureRequest) -> Iterator[BackgroundServer]:
    settings = make_settings(sid_model, auth_token=TOKEN, api_processes=request.param)
    with BackgroundServer(settings) as srv:
        yield srv


@pytest.fixture(scope="module")
def channel(locked: BackgroundServer) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(locked.address) as ch:
        yield ch


def _calls(stub: pb_grpc.DecoderStub) -> dict[str, object]:
    return {"Generate": (stub.Generate, GENERATE), "Recommend": (stub.Recommend, RECOMMEND),
            "GetInfo": (stub.GetInfo, empty_pb2.Empty())}  # fmt: skip


@pytest.mark.parametrize("metadata", WRONG_METADATA, ids=range(len(WRONG_METADATA)))
def test_every_rpc_without_the_token_is_unauthenticated(
    channel: grpc.Channel, metadata: tuple[tuple[str, str], ...]
) -> None:
    stub = pb_grpc.DecoderStub(channel)
    for name, (method, request) in _calls(stub).items():  # type: ignore[misc]
        with pytest.raises(grpc.RpcError) as info:
            method(request, metadata=metadata, timeout=30)
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED, name
        details = info.value.details() or ""
        assert "authorization: Bearer <token>" in details
        assert TOKEN not in details and "4f1c9a7e2X" not in details


def test_the_right_token_is_served(channel: grpc.Channel) -> None:
    stub = pb_grpc.DecoderStub(channel)
    for value in (f"Bearer {TOKEN}", f"bearer {TOKEN}"):  # the scheme is case-insensitive
        metadata = (("authorization", value),)
        assert len(stub.Generate(GENERATE, metadata=metadata, timeout=30).beams) == 1
        assert len(stub.Recommend(RECOMMEND, metadata=metadata, timeout=30).items) == 2
        assert stub.GetInfo(empty_pb2.Empty(), metadata=metadata, timeout=30).model_type


def test_health_is_open_and_reflection_is_not(channel: grpc.Channel) -> None:
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", "widebeam.decoder.v1.Decoder"):
        reply = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=30)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
    reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
    ask = reflection_pb2.ServerReflectionRequest(list_services="")
    with pytest.raises(grpc.RpcError) as info:
        list(reflection.ServerReflectionInfo(iter([ask]), timeout=30))
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    metadata = (("authorization", f"Bearer {TOKEN}"),)
    replies = list(reflection.ServerReflectionInfo(iter([ask]), metadata=metadata, timeout=30))
    names = {s.name for s in replies[0].list_services_response.service}
    assert "widebeam.decoder.v1.Decoder" in names


def test_client_channels_carry_the_token(locked: BackgroundServer) -> None:
    security = ChannelSecurity(token=TOKEN)
    with security.channel(locked.address) as blocking:
        assert pb_grpc.DecoderStub(blocking).GetInfo(empty_pb2.Empty(), timeout=30).vocab_size

    async def over_aio() -> int:
        async with security.aio_channel(locked.address) as aio:
            reply = await pb_grpc.DecoderStub(aio).Generate(GENERATE, timeout=30)
            return len(reply.beams)

    assert asyncio.run(over_aio()) == 1
    with ChannelSecurity().channel(locked.address) as plain, pytest.raises(grpc.RpcError) as info:
        pb_grpc.DecoderStub(plain).GetInfo(empty_pb2.Empty(), timeout=30)  # no token: refused
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_token_from_a_file_for_server_and_client(
    sid_model: SidModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = tmp_path / "decoder-token"
    secret.write_text(TOKEN + "\n")  # a mounted secret often ends with a newline
    monkeypatch.setenv("WIDEBEAM_DECODER_AUTH_TOKEN_FILE", str(secret))
    settings = make_settings(sid_model)
    assert settings.token == TOKEN
    assert DecoderClientSettings().token == TOKEN
    with BackgroundServer(settings) as srv, ChannelSecurity.from_env().channel(srv.address) as ch:
        assert pb_grpc.DecoderStub(ch).GetInfo(empty_pb2.Empty(), timeout=30).vocab_size


def test_bad_token_settings_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    file = tmp_path / "token"
    file.write_text(TOKEN)
    with pytest.raises(ValueError, match="give auth_token or auth_token_file, not both"):
        DecoderSettings(model="/m", auth_token=TOKEN, auth_token_file=file)
    with pytest.raises(ValueError, match="at least 16 characters"):
        DecoderSettings(model="/m", auth_token="short")
    with pytest.raises(ValueError, match="printable ASCII only, no spaces"):
        DecoderSettings(model="/m", auth_token="a token with spaces")
    with pytest.raises(ValueError, match="cannot be read"):
        DecoderSettings(model="/m", auth_token_file=tmp_path / "missing")
    monkeypatch.setenv("WIDEBEAM_DECODER_AUTH_TOKEN", "short")
    with pytest.raises(ValueError, match=r"invalid decoder client settings: .*16 characters") as e:
        ChannelSecurity.from_env()
    assert "short" not in str(e.value)


def test_the_token_is_no_flag(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with pytest.raises(SystemExit):  # argparse: unrecognized argument
        build_parser().parse_args(["decoder", "serve", "--auth-token", TOKEN])
    file = tmp_path / "token"
    file.write_text(TOKEN)
    monkeypatch.setenv("WIDEBEAM_DECODER_MODEL", "/m")
    args = build_parser().parse_args(["decoder", "serve", "--auth-token-file", str(file)])
    assert settings_from_args(args).token == TOKEN
    monkeypatch.setenv("WIDEBEAM_DECODER_AUTH_TOKEN", TOKEN)
    args = build_parser().parse_args(["decoder", "serve"])
    assert settings_from_args(args).token == TOKEN
