"""`bench/recif_throughput.py --smoke` (workload 4 at a CPU size): every variant and width runs,
no illegal SID, the shared-prefix prompts hit the prefix cache only with it on, and the cache
on and off return the same beams."""

from __future__ import annotations

from pathlib import Path

from tests.bench.smoke import run_smoke


def test_recif_smoke_run(tmp_path: Path) -> None:
    report, _ = run_smoke("recif_throughput.py", tmp_path, "--cache", str(tmp_path))
    rows = {(r["variant"], r["width"]): r for r in report["rows"]}
    assert set(rows) == {(v, w) for v in ("distinct", "shared", "shared-nocache") for w in (4, 8)}
    for row in rows.values():
        assert row["n"] == row["requests"] == 4 and row["throughput_rps"] > 0
        assert row["illegal_sids"] == 0 and row["beams_checked"] > 0
        assert row["floor_rps"] is None  # GPU only
        assert row["phase_captures"] == 0 and row["phase_capture_s"] == 0  # no graphs on a CPU
    for width in (4, 8):
        # 32 shared tokens = 2 pages of 16 in a 61-token prompt
        assert rows["shared", width]["prefix_hit_ratio"] > 0.4
        assert rows["shared-nocache", width]["prefix_hit_ratio"] == 0
        assert rows["distinct", width]["prefix_hit_ratio"] < 0.1
    assert report["shared_cache_on_equals_off"] is True
    assert report["shared_cache_max_score_diff"] < 1e-4
    assert report["shared_cache_beam_overlap"] == 1.0


def test_recif_profiles_the_listed_widths_only(tmp_path: Path) -> None:
    _, stdout = run_smoke(
        "recif_throughput.py", tmp_path, "--cache", str(tmp_path), "--variants", "distinct",
        "--profile", "8",
    )  # fmt: skip
    assert "--- profile: distinct, n=8, c=" in stdout
    assert "n=4, c=" not in stdout


def test_recif_profiles_apart_from_the_timed_pass(tmp_path: Path) -> None:
    report, stdout = run_smoke(
        "recif_throughput.py", tmp_path, "--cache", str(tmp_path), "--variants", "distinct",
        "--profile", "4", "--profile-apart",
    )  # fmt: skip
    assert "--- profile: distinct, n=4, c=2, a second pass after the timed one" in stdout
    assert "--- profile: distinct, n=4, c=2\n" not in stdout  # the timed pass ran unprofiled
    assert "n=8, c=" not in stdout.split("--- profile:", 1)[1].split("\n", 1)[0]
    # The second pass sends new prompts, so it meets the prefix cache no more than the timed one.
    rows = {row["width"]: row for row in report["rows"]}
    assert rows[4]["prefix_hit_ratio"] < 0.1 and rows[4]["profiled_pass_prefix_hit_ratio"] < 0.1
    assert rows[8]["profiled_pass_prefix_hit_ratio"] is None  # not profiled


def test_recif_traces_and_clocks_each_timed_phase(tmp_path: Path) -> None:
    """`--trace`: a timeline of every timed phase, printed and written for chrome://tracing;
    `--host-clock`: its host time per engine phase; both named with `--tag`, so the runs of an
    A/B keep apart."""
    _, stdout = run_smoke(
        "recif_throughput.py", tmp_path, "--cache", str(tmp_path), "--variants", "distinct",
        "--trace", "--host-clock", tag="_A1",
    )  # fmt: skip
    for width in (4, 8):
        assert f"--- trace w4_distinct_n{width}_A1\n" in stdout
        assert (tmp_path / "out" / f"trace_w4_distinct_n{width}_A1.json.gz").stat().st_size > 0
        clock = stdout.split(f"--- host clock w4_distinct_n{width}_A1: ", 1)[1]
        first, rest = clock.split("\n", 1)
        assert first.endswith(" ms a request over 4")
        assert "  prefill " in rest.split("--- ", 1)[0]  # the phases the clock wrapped
