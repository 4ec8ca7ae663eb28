"""Beam 5000 on a CUDA decoder through the gateway: SGLang's /generate and the REST routes
(/v1/completions, /v1/recommend) with n = beam = 5000, the width the README promises."""

from __future__ import annotations

import httpx
import pytest
import torch

from tests.services.decoder.conftest import SidModel
from tests.services.decoder.server.conftest import make_settings
from tests.services.gateway.support import GatewayServer, gateway_settings
from tests.services.gateway.wide_beam_checks import check_generate_matches_completions
from widebeam.services.decoder.server.background import BackgroundServer

pytestmark = pytest.mark.gpu
WIDE = 5000


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_beam_5000_through_generate_and_rest(sid_model: SidModel) -> None:
    decoder_settings = make_settings(
        sid_model, device="cuda", max_rows=WIDE, max_kv_slots=1 << 17, max_waiting=8
    )
    with (
        BackgroundServer(decoder_settings) as decoder,
        GatewayServer(gateway_settings([decoder.address], max_beam_width=WIDE)) as gateway,
        httpx.Client(base_url=gateway.url, timeout=600) as http,
    ):
        check_generate_matches_completions(http, WIDE, new_tokens=3, score_abs=1e-4)
        history = [item for item, _ in sid_model.catalog[:3]]
        reply = http.post("/v1/recommend", json={"history": history, "n": 200, "beam_width": WIDE})
        assert reply.status_code == 200, reply.text
        assert reply.json()["beam_width"] == WIDE and len(reply.json()["items"]) == 200
