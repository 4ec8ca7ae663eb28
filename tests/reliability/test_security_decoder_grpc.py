"""Security: the decoder's gRPC port (reliability row 19). A real `widebeam decoder serve`
process with a bearer token (from its environment) and mutual TLS: a direct call without the
client certificate fails the handshake, without the token it is UNAUTHENTICATED, and with both
it still meets the decoder's own limits (INVALID_ARGUMENT naming the field). A gateway and a
real `widebeam worker` process configured with the certificate and the token serve
/v1/recommend and a batch job end to end; a gateway missing either gets a clear 502 / 503. The
token appears in no command line and no log."""

from __future__ import annotations

import json
import time
from pathlib import Path

import grpc
import httpx
import pytest

from tests.reliability.support import GatewayApp, process
from tests.services.decoder.conftest import SidModel
from tests.services.gateway.batch.conftest import Worker, batch_settings
from tests.services.gateway.support import gateway_settings
from tests.support.redis_server import RedisServer
from tests.support.tls_certs import SERVER_NAME, TlsFiles, make_test_certs
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2 as pb
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2_grpc as pb_grpc
from widebeam.services.decoder.security.client import ChannelSecurity, DecoderClientSettings

TOKEN = "row19-Dec0der-T0ken-c4e9b27a51"
# Below the engine's 128 rows; the beam limit stays at the gateway's default beam (64), which
# batch rows without a beam width are given at submission.
DECODER_LIMITS = ["--max-rows", "128", "--max-beam-width", "64", "--max-n", "8",
                  "--max-exclude-ids", "50"]  # fmt: skip
LIMIT_S = 120  # hang guard only: the verdicts wait for answers


def _client_env(certs: TlsFiles, *, cert: bool = True, token: bool = True) -> dict[str, str]:
    env = {"WIDEBEAM_DECODER_CLIENT_TLS_CA_FILE": str(certs.ca),
           "WIDEBEAM_DECODER_CLIENT_TLS_SERVER_NAME": SERVER_NAME}  # fmt: skip
    if cert:
        env |= {"WIDEBEAM_DECODER_CLIENT_TLS_CERT_FILE": str(certs.client_cert),
                "WIDEBEAM_DECODER_CLIENT_TLS_KEY_FILE": str(certs.client_key)}  # fmt: skip
    if token:
        env["WIDEBEAM_DECODER_AUTH_TOKEN"] = TOKEN
    return env


def _security(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> ChannelSecurity:
    for name in ("CERT_FILE", "KEY_FILE"):
        monkeypatch.delenv(f"WIDEBEAM_DECODER_CLIENT_TLS_{name}", raising=False)
    monkeypatch.delenv("WIDEBEAM_DECODER_AUTH_TOKEN", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return DecoderClientSettings().security()


def _recommend(security: ChannelSecurity, address: str, request: pb.RecommendRequest) -> object:
    with security.channel(address) as channel:
        return pb_grpc.DecoderStub(channel).Recommend(request, timeout=60)


def _code(security: ChannelSecurity, address: str, request: pb.RecommendRequest) -> str:
    try:
        _recommend(security, address, request)
    except grpc.RpcError as exc:
        return f"{exc.code().name}: {exc.details()}"
    return "OK"


def _wait(predicate: object, what: str) -> None:
    deadline = time.monotonic() + LIMIT_S
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_decoder_port_needs_certificate_and_token_and_keeps_its_limits(
    sid_model: SidModel, rel_redis: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    certs = make_test_certs(tmp_path / "tls")
    server_env = {
        "WIDEBEAM_DECODER_AUTH_TOKEN": TOKEN,
        "WIDEBEAM_DECODER_TLS_CERT_FILE": str(certs.server_cert),
        "WIDEBEAM_DECODER_TLS_KEY_FILE": str(certs.server_key),
        "WIDEBEAM_DECODER_TLS_CLIENT_CA_FILE": str(certs.ca),
    }
    log = tmp_path / "decoder.log"
    args = ["decoder", "serve", "--model", str(sid_model.model_dir), "--catalog",
            str(sid_model.catalog_path), "--port", "0", *DECODER_LIMITS]  # fmt: skip
    with process(args, server_env, log, "decoder serving on") as decoder:
        line = next(ln for ln in log.read_text().splitlines() if "decoder serving on" in ln)
        address = line.rsplit(" ", 1)[1]
        assert TOKEN.encode() not in Path(f"/proc/{decoder.pid}/cmdline").read_bytes()
        history = [item for item, _ in sid_model.catalog[:3]]
        ok = pb.RecommendRequest(history_item_ids=history, n=4, beam_width=8)
        wide = pb.RecommendRequest(history_item_ids=history, n=32, beam_width=64)
        wider = pb.RecommendRequest(history_item_ids=history, n=2, beam_width=100)

        # Direct calls: no certificate, no token, then both but beyond the decoder's limits.
        everything = _security(monkeypatch, _client_env(certs))
        handshake = _code(_security(monkeypatch, _client_env(certs, cert=False)), address, ok)
        assert handshake.split(":")[0] in ("UNAVAILABLE", "DEADLINE_EXCEEDED"), handshake
        no_token = _code(_security(monkeypatch, _client_env(certs, token=False)), address, ok)
        assert no_token.startswith("UNAUTHENTICATED: missing or wrong decoder token")
        assert _code(everything, address, wide) == (
            "INVALID_ARGUMENT: n 32 exceeds this decoder's max_n 8"
        )
        assert _code(everything, address, wider) == (
            "INVALID_ARGUMENT: beam_width 100 exceeds this decoder's max_beam_width 64"
        )
        too_many = pb.RecommendRequest(
            history_item_ids=history, n=2, exclude_item_ids=[f"x{i}" for i in range(51)]
        )
        assert _code(everything, address, too_many) == (
            "INVALID_ARGUMENT: exclude_item_ids has 51 entries; this decoder's max_exclude_ids "
            "is 50"
        )
        assert _code(everything, address, ok) == "OK"

        # The gateway, configured like the decoder's clients, serves; missing a piece, 502/503.
        body = {"history": history, "n": 4, "beam_width": 8}
        for env, status in [
            (_client_env(certs), 200),
            (_client_env(certs, token=False), 502),
            (_client_env(certs, cert=False), 503),
        ]:
            _security(monkeypatch, env)  # the gateway reads the same variables
            settings = gateway_settings([address], redis_url=rel_redis.url)
            with GatewayApp(settings) as gateway:
                reply = httpx.post(f"{gateway.url}/v1/recommend", json=body, timeout=60)
            assert reply.status_code == status, (env.keys(), reply.text)
            assert TOKEN not in reply.text
            if status == 502:
                assert "UNAUTHENTICATED" in reply.text
            if status == 200:
                assert len(reply.json()["items"]) == 4

        # A real worker process with the certificate and the token runs a batch job.
        _security(monkeypatch, _client_env(certs))  # Worker passes this environment on
        rows = [{"history": history[i:], "n": 2} for i in range(3)]
        with GatewayApp(gateway_settings([address], redis_url=rel_redis.url)) as gateway:
            submitted = httpx.post(f"{gateway.url}/v1/batch-jobs", json={"requests": rows},
                                   timeout=30)  # fmt: skip
            assert submitted.status_code == 202, submitted.text
            job = submitted.json()["id"]
            settings = batch_settings(rel_redis.url, address, row_budget_s=10, rpc_timeout_s=10,
                                      visibility_timeout_s=600)  # fmt: skip
            worker = Worker(settings, tmp_path / "worker.log")
            try:
                worker.wait_ready(LIMIT_S)
                url = f"{gateway.url}/v1/batch-jobs/{job}"
                _wait(lambda: httpx.get(url).json()["status"] in ("succeeded", "failed"), "the job")
                status = httpx.get(url).json()
                results = httpx.get(f"{url}/results").text
            finally:
                worker.stop()
            assert status["status"] == "succeeded", (status, results, worker.log())
            answers = [json.loads(line) for line in results.splitlines()]
            assert [len(a["items"]) for a in answers] == [2, 2, 2], answers
    decoder_log = log.read_text(errors="replace")
    assert "mutual TLS, token required" in decoder_log
    assert "refused" in decoder_log and "without the decoder token" in decoder_log
    for text in (decoder_log, (tmp_path / "worker.log").read_text(errors="replace")):
        assert TOKEN not in text
