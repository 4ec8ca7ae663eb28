"""`bench/harness.profiled`: which timed phases `--profile [PHASES]` names, and where
`--profile-apart` puts their profile; the scripts take only the run options they act on."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from tests.bench.smoke import BENCH, load_bench_module


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
    harness.add_run_args(parser, profile=True)
    assert parser.parse_args(["--profile", "50,1000"]).profile == "50,1000"
    assert parser.parse_args(["--profile"]).profile == harness.FIRST_PHASE
    with pytest.raises(SystemExit):
        parser.parse_args(["--profile", "n=50"])
    assert "comma-separated integers, got 'n=50'" in capsys.readouterr().err


def test_profile_apart_moves_the_profile_after_the_timed_pass() -> None:
    harness = load_bench_module("harness")
    parser = argparse.ArgumentParser()
    harness.add_run_args(parser, profile=True)
    inside = parser.parse_args(["--profile", "50,1000"])
    apart = parser.parse_args(["--profile", "50,1000", "--profile-apart"])
    assert harness.profile_timed(inside, 1000, 50) and not harness.profile_after(inside, 1000, 50)
    assert harness.profile_after(apart, 1000, 50) and not harness.profile_timed(apart, 1000, 50)
    for args in (inside, apart):  # a phase --profile does not name: neither
        assert not harness.profile_timed(args, 512, 50) and not harness.profile_after(args, 512, 50)
    alone = parser.parse_args(["--profile-apart"])  # nothing to profile: nothing moves
    assert not harness.profile_timed(alone, 50, 50) and not harness.profile_after(alone, 50, 50)


@pytest.mark.parametrize(
    ("script", "option"),
    [
        ("wide_beam.py", "--profile"),
        ("wide_beam.py", "--profile-apart"),
        ("profile_step.py", "--trace"),
        ("suffix_sharing.py", "--profile-apart"),
        ("recif_throughput.py", "--normalization"),
        ("wide_beam.py", "--normalization"),
    ],
)
def test_a_script_refuses_the_options_it_would_ignore(script: str, option: str) -> None:
    done = subprocess.run(
        [sys.executable, script, option], cwd=BENCH, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"unrecognized arguments: {option}" in done.stderr
