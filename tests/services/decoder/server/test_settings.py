"""Settings come from WIDEBEAM_DECODER_* variables; flags override them."""

from __future__ import annotations

import dataclasses
import enum
import typing
from pathlib import Path
from typing import Any

import pytest

from widebeam.cli import build_parser
from widebeam.services.decoder import server
from widebeam.services.decoder.config import EngineConfig
from widebeam.services.decoder.server.cli import FLAG_NAMES, settings_from_args
from widebeam.services.decoder.server.settings import ENGINE_SETTING_NAMES, DecoderSettings


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


def _other_value(field: dataclasses.Field[Any], hint: Any) -> Any:
    """A valid value of an EngineConfig field that is not its default."""
    if field.name in _VALUES:
        return _VALUES[field.name]
    default = None if field.default is dataclasses.MISSING else field.default
    kind = next(a for a in typing.get_args(hint) or (hint,) if a is not type(None))
    if kind is bool:
        return not default
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return next(member for member in kind if member != default)
    if kind is int:
        return 2 * (default or 32)
    if kind is float:
        return 0.25
    return f"/{field.name}"


# Fields whose value must satisfy more than its type (kv_memory_fraction needs CUDA).
_VALUES = {"device": "cuda:1", "attention_backend": "torch", "capture_beam_widths": (16, 64)}


def _text(value: Any) -> str:
    """How a value is written in a flag or an environment variable (tuples: comma-separated)."""
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return str(value).lower() if isinstance(value, bool) else str(value)


def _engine_values() -> dict[str, Any]:
    hints = typing.get_type_hints(EngineConfig)
    return {f.name: _other_value(f, hints[f.name]) for f in dataclasses.fields(EngineConfig)}


def test_every_engine_field_is_an_environment_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    values = _engine_values()
    for field, value in values.items():
        name = ENGINE_SETTING_NAMES[field].upper()
        monkeypatch.setenv(f"WIDEBEAM_DECODER_{name}", _text(value))
    config = DecoderSettings().engine_config()
    for field, value in values.items():
        got = getattr(config, field)
        assert got == value and type(got) is type(value), field
        assert getattr(EngineConfig(model_dir="/m"), field) != value or field == "model_dir"


def test_every_engine_field_is_a_serve_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    argv = ["decoder", "serve"]
    for field, value in _engine_values().items():
        name = ENGINE_SETTING_NAMES[field]
        flag = FLAG_NAMES.get(name, "--" + name.replace("_", "-"))
        if isinstance(value, bool):
            argv.append(flag if value else "--no-" + flag.removeprefix("--"))
        else:
            argv += [flag, _text(value)]
    config = settings_from_args(build_parser().parse_args(argv)).engine_config()
    assert dataclasses.asdict(config) == _engine_values()


def test_defaults_are_the_engine_defaults() -> None:
    assert DecoderSettings(model="/m").engine_config() == EngineConfig(model_dir="/m")


def test_flags_beat_environment_for_engine_switches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WIDEBEAM_DECODER_MODEL", "/m")
    monkeypatch.setenv("WIDEBEAM_DECODER_CUDA_GRAPHS", "false")
    assert DecoderSettings().engine_config().cuda_graphs is False
    args = build_parser().parse_args(["decoder", "serve", "--cuda-graphs"])
    assert settings_from_args(args).engine_config().cuda_graphs is True


def test_kv_memory_fraction_needs_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WIDEBEAM_DECODER_MODEL", "/m")
    args = build_parser().parse_args(["decoder", "serve", "--kv-memory-fraction", "0.8"])
    with pytest.raises(ValueError, match="device 'cpu' has none to measure: give max_kv_slots"):
        settings_from_args(args)
    args = build_parser().parse_args(
        ["decoder", "serve", "--kv-memory-fraction", "1.5", "--device", "cuda"]
    )
    with pytest.raises(ValueError, match=r"kv_memory_fraction must be in \(0, 1\]"):
        settings_from_args(args)


def test_engine_errors_are_clear(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WIDEBEAM_DECODER_MODEL", "/m")
    args = build_parser().parse_args(["decoder", "serve", "--max-prefill-tokens", "0"])
    with pytest.raises(ValueError, match=r"invalid decoder settings: .*max_prefill_tokens must"):
        settings_from_args(args)
    with pytest.raises(SystemExit):  # argparse: invalid choice, exit 2
        build_parser().parse_args(["decoder", "serve", "--beam-expansion", "fast"])


def test_readme_lists_every_setting() -> None:
    readme = (Path(server.__file__).parent / "README.md").read_text()
    missing = [n for n in DecoderSettings.model_fields if f"| `{n.upper()}` |" not in readme]
    assert not missing, f"settings missing from the README's settings table: {missing}"
