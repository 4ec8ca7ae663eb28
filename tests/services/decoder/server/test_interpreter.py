"""The decoder's processes set the interpreter's thread switch interval from their settings."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
from pydantic import ValidationError

from widebeam.services.decoder.server.interpreter import tune_interpreter
from widebeam.services.decoder.server.settings import DecoderSettings


@pytest.fixture
def restored_interval() -> Iterator[None]:
    before = sys.getswitchinterval()
    yield
    sys.setswitchinterval(before)


def test_switch_interval_comes_from_the_settings(restored_interval: None) -> None:
    tune_interpreter(DecoderSettings(model="/m", switch_interval_ms=0.5))
    assert sys.getswitchinterval() == pytest.approx(0.0005)
    tune_interpreter(DecoderSettings(model="/m"))
    assert sys.getswitchinterval() == pytest.approx(0.005)  # Python's own default


@pytest.mark.parametrize("bad", [0, -1, 101])
def test_bad_switch_interval_is_named(bad: float) -> None:
    with pytest.raises(ValidationError, match="switch_interval_ms"):
        DecoderSettings(model="/m", switch_interval_ms=bad)
