"""Settings come from WIDEBEAM_DECODER_* variables; flags override them."""

from __future__ import annotations

import pytest

from widebeam.cli import build_parser
from widebeam.services.decoder.server.cli import settings_from_args
from widebeam.services.decoder.server.settings import DecoderSettings


def test_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WIDEBEAM_DECODER_MODEL", "/m")
    monkeypatch.setenv("WIDEBEAM_DECODER_CATALOGS", "books, films,")
    monkeypatch.setenv("WIDEBEAM_DECODER_MAX_WAITING", "3")
    settings = DecoderSettings()
    assert settings.model == "/m" and settings.catalogs == ["books", "films"]
    assert settings.max_waiting == 3
    assert settings.redis_url is None and settings.port == 50051


def test_flags_override_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WIDEBEAM_DECODER_MODEL", "/env-model")
    monkeypatch.setenv("WIDEBEAM_DECODER_PORT", "7000")
    args = build_parser().parse_args(
        ["decoder", "serve", "--model", "/flag-model", "--catalogs", "a,b", "--grace-period", "2"]
    )
    settings = settings_from_args(args)
    assert settings.model == "/flag-model" and settings.port == 7000
    assert settings.catalogs == ["a", "b"] and settings.grace_period_s == 2.0


def test_invalid_values_are_clear(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WIDEBEAM_DECODER_MODEL", "/m")
    args = build_parser().parse_args(["decoder", "serve", "--max-waiting", "0"])
    with pytest.raises(ValueError, match="max_waiting: Input should be greater than or equal"):
        settings_from_args(args)
