"""Widths past the old limits (beam 512, n 128): the gateway's max_n follows its
max_beam_width, `gateway serve --max-beam-width` raises both, and a real decoder + gateway
raised to 600 serve n = beam = 600 through /generate, /v1/completions and /v1/recommend."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.services.decoder.conftest import SidModel
from tests.services.decoder.server.conftest import make_settings
from tests.services.gateway.support import GatewayServer, gateway_settings
from tests.services.gateway.wide_beam_checks import check_generate_matches_completions
from widebeam.cli import build_parser
from widebeam.services.decoder.server.background import BackgroundServer
from widebeam.services.gateway.cli import settings_from_args
from widebeam.services.gateway.settings import GatewaySettings

WIDE = 600  # above the old gateway limits of beam 512 and n 128


def test_max_n_follows_max_beam_width(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WIDEBEAM_GATEWAY_MAX_N", raising=False)
    monkeypatch.delenv("WIDEBEAM_GATEWAY_MAX_BEAM_WIDTH", raising=False)
    assert (GatewaySettings().max_beam_width, GatewaySettings().max_n) == (512, 512)
    assert GatewaySettings(max_beam_width=5000).max_n == 5000
    assert GatewaySettings(max_beam_width=5000, max_n=64).max_n == 64
    monkeypatch.setenv("WIDEBEAM_GATEWAY_MAX_BEAM_WIDTH", "3200")
    assert GatewaySettings().max_n == 3200
    flags = build_parser().parse_args(["gateway", "serve", "--max-beam-width", "5000"])
    assert (settings_from_args(flags).max_beam_width, settings_from_args(flags).max_n) == (
        5000,
        5000,
    )


@pytest.fixture(scope="module")
def wide(sid_model: SidModel) -> Iterator[httpx.Client]:
    # The decoder's request limits follow its rows (max_beam_width = max_n = max_rows).
    decoder_settings = make_settings(sid_model, max_rows=WIDE, max_kv_slots=1 << 16)
    with (
        BackgroundServer(decoder_settings) as decoder,
        GatewayServer(gateway_settings([decoder.address], max_beam_width=WIDE)) as gateway,
        httpx.Client(base_url=gateway.url, timeout=300) as http,
    ):
        yield http


def test_models_reports_the_raised_width(wide: httpx.Client) -> None:
    assert wide.get("/v1/models").json()["data"][0]["max_beam_width"] == WIDE


def test_n_equals_beam_at_a_raised_width_through_generate_and_completions(
    wide: httpx.Client,
) -> None:
    check_generate_matches_completions(wide, WIDE, new_tokens=2)
    too_wide = wide.post("/generate", json={"input_ids": [1], "sampling_params": {"n": WIDE + 1}})
    assert too_wide.status_code == 400 and too_wide.json()["error"]["param"] == "sampling_params.n"


def test_recommend_at_a_raised_width(wide: httpx.Client, sid_model: SidModel) -> None:
    history = [item for item, _ in sid_model.catalog[:3]]
    reply = wide.post("/v1/recommend", json={"history": history, "n": 150, "beam_width": WIDE})
    assert reply.status_code == 200, reply.text
    items = [item["item_id"] for item in reply.json()["items"]]
    assert len(items) == 150 and len(set(items)) == 150  # n past the old limit of 128
