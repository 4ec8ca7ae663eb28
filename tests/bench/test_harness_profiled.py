"""`bench/harness.profiled`: which timed phases `--profile [PHASES]` names."""

from __future__ import annotations

import argparse

import pytest

from tests.bench.smoke import load_bench_module


def test_profiled_phases() -> None:
    harness = load_bench_module("harness")
    assert not harness.profiled(None, 50, 50)
    assert harness.profiled(harness.FIRST_PHASE, 50, 50)
    assert not harness.profiled(harness.FIRST_PHASE, 512, 50)
    assert harness.profiled("50,1000", 1000, 50)
    assert not harness.profiled("50,1000", 512, 50)


def test_profiled_refuses_a_malformed_list() -> None:
    harness = load_bench_module("harness")
    with pytest.raises(SystemExit, match="comma-separated integers, got 'n=50'"):
        harness.profiled("n=50", 50, 50)


def test_the_command_line_refuses_a_malformed_list_at_once(
    capsys: pytest.CaptureFixture[str],
) -> None:
    harness = load_bench_module("harness")
    parser = argparse.ArgumentParser()
    harness.add_engine_args(parser)
    assert parser.parse_args(["--profile", "50,1000"]).profile == "50,1000"
    assert parser.parse_args(["--profile"]).profile == harness.FIRST_PHASE
    with pytest.raises(SystemExit):
        parser.parse_args(["--profile", "n=50"])
    assert "comma-separated integers, got 'n=50'" in capsys.readouterr().err
