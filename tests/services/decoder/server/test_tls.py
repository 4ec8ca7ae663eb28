"""TLS and mutual TLS on the decoder's port, with a CA made for the test: who gets a call
through and who is refused at the handshake; TLS and the token together; clear errors for
missing or wrong files."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf import empty_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.services.decoder.conftest import SidModel
from tests.services.decoder.server.conftest import make_settings
from tests.support.tls_certs import SERVER_NAME, TlsFiles, make_test_certs
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2_grpc as pb_grpc
from widebeam.services.decoder.security.client import ChannelSecurity, DecoderClientSettings
from widebeam.services.decoder.server.background import BackgroundServer
from widebeam.services.decoder.server.settings import DecoderSettings

TOKEN = "tls-T0ken-8e21f0c3d7"
# The handshake failing shows as UNAVAILABLE (no connection) within the call's deadline.
REFUSED = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_test_certs(tmp_path_factory.mktemp("tls"))


def client(certs: TlsFiles, *, cert: bool = True, stranger: bool = False, **extra: object):
    """A client's settings: the CA, and a certificate of ours or of another CA."""
    fields: dict[str, object] = {"client_tls_ca_file": certs.ca,
                                 "client_tls_server_name": SERVER_NAME}  # fmt: skip
    if cert:
        pair = (certs.stranger_cert, certs.stranger_key) if stranger else (
            certs.client_cert, certs.client_key)  # fmt: skip
        fields |= {"client_tls_cert_file": pair[0], "client_tls_key_file": pair[1]}
    return DecoderClientSettings(**(fields | extra)).security()


def _info(security: ChannelSecurity, address: str) -> int:
    with security.channel(address) as channel:
        return pb_grpc.DecoderStub(channel).GetInfo(empty_pb2.Empty(), timeout=10).vocab_size


def _refused(security: ChannelSecurity, address: str) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as info:
        _info(security, address)
    return info.value.code()


@pytest.fixture(scope="module")
def tls_only(sid_model: SidModel, certs: TlsFiles) -> Iterator[BackgroundServer]:
    settings = make_settings(
        sid_model, tls_cert_file=certs.server_cert, tls_key_file=certs.server_key
    )
    with BackgroundServer(settings) as srv:
        yield srv


@pytest.fixture(scope="module", params=[0, 1], ids=["port-in-engine", "api-process"])
def mutual(
    sid_model: SidModel, certs: TlsFiles, request: pytest.FixtureRequest
) -> Iterator[BackgroundServer]:
    settings = make_settings(
        sid_model, tls_cert_file=certs.server_cert, tls_key_file=certs.server_key,
        tls_client_ca_file=certs.ca, auth_token=TOKEN, api_processes=request.param,
    )  # fmt: skip
    with BackgroundServer(settings) as srv:
        yield srv


def test_tls_serves_clients_that_trust_its_ca(tls_only: BackgroundServer, certs: TlsFiles) -> None:
    address = tls_only.address
    assert _info(client(certs, cert=False), address) > 0
    assert _info(client(certs), address) > 0  # a certificate nobody asked for is fine
    assert _refused(ChannelSecurity(), address) in REFUSED  # plaintext
    # The certificate names SERVER_NAME and 127.0.0.1: another expected name fails.
    assert _refused(client(certs, cert=False, client_tls_server_name="other.test"), address) in (
        REFUSED
    )


def test_mutual_tls_needs_a_client_certificate_of_its_ca(
    mutual: BackgroundServer, certs: TlsFiles
) -> None:
    address = mutual.address
    assert _info(client(certs, auth_token=TOKEN), address) > 0
    assert _refused(client(certs, cert=False, auth_token=TOKEN), address) in REFUSED
    assert _refused(client(certs, stranger=True, auth_token=TOKEN), address) in REFUSED
    assert _refused(ChannelSecurity(token=TOKEN), address) in REFUSED  # plaintext
    # Through the handshake, the token is still checked; health stays open to probes.
    assert _refused(client(certs), address) == grpc.StatusCode.UNAUTHENTICATED
    with client(certs).channel(address) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=10
        )
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_bad_tls_settings_are_refused(certs: TlsFiles, tmp_path: Path) -> None:
    not_pem = tmp_path / "cert.txt"
    not_pem.write_text("hello")
    with pytest.raises(ValueError, match="tls_cert_file and tls_key_file go together"):
        DecoderSettings(model="/m", tls_cert_file=certs.server_cert)
    with pytest.raises(ValueError, match="tls_client_ca_file needs tls_cert_file"):
        DecoderSettings(model="/m", tls_client_ca_file=certs.ca)
    with pytest.raises(ValueError, match=r"tls_cert_file .* is not a PEM file"):
        DecoderSettings(model="/m", tls_cert_file=not_pem, tls_key_file=certs.server_key)
    with pytest.raises(ValueError, match=r"tls_key_file .* cannot be read"):
        DecoderSettings(
            model="/m", tls_cert_file=certs.server_cert, tls_key_file=tmp_path / "missing"
        )
    with pytest.raises(ValueError, match="client_tls_cert_file and client_tls_key_file go"):
        DecoderClientSettings(client_tls_ca_file=certs.ca, client_tls_cert_file=certs.client_cert)
    with pytest.raises(ValueError, match="a client certificate needs client_tls_ca_file"):
        DecoderClientSettings(
            client_tls_cert_file=certs.client_cert, client_tls_key_file=certs.client_key
        )
