"""`bench/stack.py`'s sweep deadlines: a fixed one (--sweep-deadline-ms), or one stated against
the light-load latency (--sweep-deadline-x: that many times the 0.5x phase's p99, for the
phases after it), and the 2x row's p99 over the 0.5x one."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from tests.bench.smoke import BENCH, load_bench_module, run_smoke


def _args(fixed: int | None = None, times: float | None = None) -> argparse.Namespace:
    return argparse.Namespace(sweep_deadline_ms=fixed, sweep_deadline_x=times)


def test_a_fixed_deadline_holds_for_every_phase() -> None:
    stack = load_bench_module("stack")
    assert stack.phase_deadline_ms(_args(300), []) == 300
    assert stack.phase_deadline_ms(_args(300), [{"load": 0.5, "p99_ms": 90.0}]) == 300
    assert stack.phase_deadline_ms(_args(), [{"load": 0.5, "p99_ms": 90.0}]) is None


def test_a_relative_deadline_scales_the_light_phase_p99_for_the_phases_after_it() -> None:
    stack = load_bench_module("stack")
    args = _args(times=1.8)
    assert stack.phase_deadline_ms(args, []) is None  # the 0.25x and 0.5x phases: none
    assert stack.phase_deadline_ms(args, [{"load": 0.25, "p99_ms": 70.0}]) is None
    done = [{"load": 0.25, "p99_ms": 70.0}, {"load": 0.5, "p99_ms": 101.6}]
    assert stack.phase_deadline_ms(args, done) == 183  # round(1.8 x 101.6)
    done.append({"load": 1.0, "p99_ms": 150.0})
    assert stack.phase_deadline_ms(args, done) == 183  # always the 0.5x phase's


def test_the_2x_row_reads_against_the_light_phase() -> None:
    stack = load_bench_module("stack")
    rows = [{"load": 0.5, "p99_ms": 100.0}, {"load": 2.0, "p99_ms": 256.0}]
    assert [stack.p99_vs_reference(r, rows) for r in rows] == ["1.00", "2.56"]
    assert stack.p99_vs_reference(rows[1], rows[1:]) == "-"  # no 0.5x phase ran


def test_deadline_options_are_refused_together_and_without_a_light_phase() -> None:
    for extra, message in [
        (["--sweep-deadline-ms", "300", "--sweep-deadline-x", "2"], "not both"),
        (["--sweep-deadline-x", "0"], "must be > 0"),
        (["--sweep-deadline-x", "2", "--loads", "1,2"], "--loads needs it"),
    ]:
        done = subprocess.run(
            [sys.executable, "stack.py", "--quick", *extra],
            cwd=BENCH, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 2 and message in done.stderr, (extra, done.stderr[-500:])


def test_the_sweep_sends_the_relative_deadline_after_the_light_phase(tmp_path: Path) -> None:
    """End to end on the CPU: the 0.5x phase sends no deadline, the 2x phase 1,000 times its
    p99 (generous on purpose: what is asserted is the arithmetic, never the machine's speed)."""
    report, stdout = run_smoke(
        "stack.py", tmp_path, "--cache", str(tmp_path), "--sweep-deadline-x", "1000",
    )  # fmt: skip
    light, heavy = report["sweep"]
    assert (light["load"], heavy["load"]) == (0.5, 2.0)
    assert light["deadline_ms"] is None
    assert heavy["deadline_ms"] == max(1, round(1000 * light["p99_ms"]))
    assert report["env"]["sweep_deadline_x"] == 1000.0
    assert "p99 ÷ 0.5x p99" in stdout
