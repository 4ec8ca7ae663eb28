"""Security: every service reaches a password-protected Redis, and a TLS-only one, through its
Redis URL (`redis://:PASSWORD@...`, `rediss://...?ssl_cert_reqs=required&ssl_ca_certs=CA`):
the catalog service publishes, the decoder follows the catalog, the gateway stores a batch job
and enqueues it, and a real `widebeam worker` process completes it. The password appears in no
log of those processes; a wrong password is a 503, never a 500."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest
from google.protobuf import empty_pb2

from tests.reliability.support import CatalogApp, GatewayApp, SecureRedis
from tests.services.decoder.conftest import SidModel
from tests.services.decoder.server.conftest import make_settings
from tests.services.gateway.batch.conftest import Worker, batch_settings
from tests.services.gateway.support import gateway_settings
from widebeam.services.catalog.service import CatalogSettings
from widebeam.services.catalog.sid_layout import SidLayout
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2_grpc as pb_grpc
from widebeam.services.decoder.server.background import BackgroundServer

PASSWORD = "r3dis-Pa55-never-logged"
ROWS = [{"user_id": f"u{i}", "history": [f"item-{i}", f"item-{i + 7}"], "n": 3} for i in range(6)]


def _wait(predicate: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


@pytest.mark.parametrize("tls", [False, True], ids=["password", "tls+password"])
def test_every_service_over_a_protected_redis(
    sid_model: SidModel, tmp_path: Path, tls: bool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("DEBUG")
    layout = SidLayout.from_tokenizer(str(sid_model.model_dir))
    assert layout is not None
    with SecureRedis(tmp_path / "redis", PASSWORD, tls) as redis_server:
        url = redis_server.url
        catalog_settings = CatalogSettings(
            redis_url=url, namespace="sec", port=0, sid_layout=layout.to_spec()
        )
        with CatalogApp(catalog_settings) as catalog:
            upload = httpx.post(
                f"{catalog.url}/v1/catalogs/default/versions",
                content=sid_model.catalog_path.read_bytes(),
                headers={"Content-Type": "application/x-ndjson"},
                timeout=60,
            )
            assert upload.status_code == 201, upload.text
            assert httpx.get(f"{catalog.url}/readyz").status_code == 200

        settings = make_settings(
            sid_model, catalog_file=None, redis_url=url, catalog_namespace="sec"
        )
        with BackgroundServer(settings) as decoder:
            import grpc

            with grpc.insecure_channel(decoder.address) as channel:
                stub = pb_grpc.DecoderStub(channel)

                def follows() -> bool:
                    info = stub.GetInfo(empty_pb2.Empty(), timeout=5)
                    return any(c.name == "default" and c.version == "1" for c in info.catalogs)

                _wait(follows, 30, "the decoder to load the catalog from Redis")

            with GatewayApp(gateway_settings([decoder.address], redis_url=url)) as gateway:
                submitted = httpx.post(
                    f"{gateway.url}/v1/batch-jobs", json={"requests": ROWS}, timeout=30
                )
                assert submitted.status_code == 202, submitted.text
                job = submitted.json()["id"]
                worker = Worker(
                    batch_settings(
                        url,
                        decoder.address,
                        row_budget_s=5,
                        rpc_timeout_s=5,
                        visibility_timeout_s=300,
                    ),
                    tmp_path / "worker.log",
                )
                try:
                    worker.wait_ready()

                    def done() -> bool:
                        status = httpx.get(f"{gateway.url}/v1/batch-jobs/{job}").json()
                        return status["status"] == "succeeded"

                    _wait(done, 60, "the batch job")
                    results = httpx.get(f"{gateway.url}/v1/batch-jobs/{job}/results").text
                finally:
                    worker.stop()
                rows = [json.loads(line) for line in results.splitlines()]
                assert [r["row"] for r in rows] == list(range(len(ROWS)))
                assert all(len(r["items"]) == 3 for r in rows), rows
                worker_log = (tmp_path / "worker.log").read_text(errors="replace")
                assert "ready." in worker_log
                assert PASSWORD not in worker_log

        # A wrong password: 503 from the services, not a 500 or a hang.
        wrong = url.replace(PASSWORD, "not-the-password")
        with CatalogApp(CatalogSettings(redis_url=wrong, port=0)) as catalog:
            assert httpx.get(f"{catalog.url}/readyz", timeout=30).status_code == 503
            listing = httpx.get(f"{catalog.url}/v1/catalogs", timeout=30)
            assert listing.status_code == 503 and PASSWORD not in listing.text
    assert PASSWORD not in caplog.text
