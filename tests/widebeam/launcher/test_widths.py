"""`widebeam up --max-beam-width / --max-n`: what each child is handed (flags, environment)."""

from __future__ import annotations

import pytest

from widebeam.cli import build_parser
from widebeam.launcher.readiness import StartupError
from widebeam.launcher.widths import DECODER_MAX_ROWS_ENV, WORKER_MAX_BEAM_ENV, Widths


def widths(*flags: str) -> Widths:
    return Widths.from_args(build_parser().parse_args(["up", "--model", "m", *flags]))


def test_without_flags_every_child_keeps_its_own_default() -> None:
    none = widths()
    assert (none.gateway_flags(), none.decoder_flags(), none.worker_env()) == ([], [], {})


def test_a_wide_beam_reaches_the_gateway_the_decoder_and_its_rows_and_the_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(DECODER_MAX_ROWS_ENV, raising=False)
    wide = widths("--max-beam-width", "5000")
    assert wide.gateway_flags() == ["--max-beam-width", "5000"]  # max_n follows on each side
    assert wide.decoder_flags() == ["--max-beam-width", "5000", "--max-rows", "5000"]
    assert wide.worker_env() == {WORKER_MAX_BEAM_ENV: "5000"}
    both = widths("--max-beam-width", "3200", "--max-n", "3200")
    assert both.gateway_flags() == ["--max-beam-width", "3200", "--max-n", "3200"]


def test_rows_are_never_lowered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DECODER_MAX_ROWS_ENV, raising=False)
    assert widths("--max-beam-width", "100").decoder_flags() == ["--max-beam-width", "100"]
    monkeypatch.setenv(DECODER_MAX_ROWS_ENV, "8192")
    assert widths("--max-beam-width", "5000").decoder_flags() == ["--max-beam-width", "5000"]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--max-beam-width", "0"), "--max-beam-width must be >= 1"),
        (("--max-n", "-3"), "--max-n must be >= 1"),
        (("--max-beam-width", "10", "--max-n", "11"), "--max-n (11) exceeds --max-beam-width"),
    ],
)
def test_bad_widths_stop_the_start(flags: tuple[str, ...], message: str) -> None:
    with pytest.raises(StartupError, match=message.replace("(", r"\(").replace(")", r"\)")):
        widths(*flags)
