"""`bench/suffix_sharing.py`: the sharing arithmetic on a known beam tree, and the CPU smoke run
(a tiny model's wide beam reports at the asked suffix lengths)."""

from __future__ import annotations

from pathlib import Path

import torch

from tests.bench.smoke import load_bench_module, run_smoke


def test_sharing_of_a_known_tree() -> None:
    sharing = load_bench_module("suffix_sharing").sharing
    # 4 rows, 3 tokens: rows 0-1 share slots 10, 20; rows 2-3 share 10, 21; all own the last
    table = torch.tensor([[10, 20, 30], [10, 20, 31], [10, 21, 32], [10, 21, 33]])
    report = sharing(table)
    assert report["distinct_at_depth"] == [1, 2, 4]
    assert report["unique_read_fraction"] == 7 / 12
    # r = 1: the first two tokens once per ancestor at depth 1 (2 groups), the last per row
    assert report["split_read_fraction"]["1"] == {"fraction": (2 * 2 + 4) / 12, "groups": 2}
    assert report["split_read_fraction"]["2"] == {"fraction": (1 * 1 + 8) / 12, "groups": 1}
    assert "4" not in report["split_read_fraction"]  # no split longer than the suffix
    reads = report["kernel_reads"]
    # 8:8 shares nothing of 3 tokens; 1:1 reads tokens 0-1 once per group at depth 1 (2 items)
    assert reads["one level 8:8, items of 16"] == {"fraction": 1.0, "items": 0}
    assert reads["one level 1:1, items of 16"] == {"fraction": (2 * 2 + 4) / 12, "items": 2}
    assert reads["geometric, private 2, items of 16"] == {
        "fraction": (1 + 4 * 2) / 12, "items": 1, "levels": 1
    }  # fmt: skip


def test_geometric_levels_halve_towards_the_newest_token() -> None:
    bounds = load_bench_module("suffix_sharing").geometric_bounds
    assert bounds(10) == [0, 5, 7, 9, 10]
    assert bounds(2) == [0, 2] and bounds(0) == [0]


def test_simulated_tree_shares_like_a_beam_search(tmp_path: Path) -> None:
    report, stdout = run_smoke(
        "suffix_sharing.py", tmp_path, "--simulated", "--beams", "200", "--tokens", "24",
        "--at", "8,24",
    )  # fmt: skip
    short, long = report["reports"]
    assert (short["length"], long["length"]) == (8, 24)
    assert long["unique_read_fraction"] < short["unique_read_fraction"] < 1
    one_level = long["kernel_reads"]["one level 8:8, items of 16"]
    assert long["unique_read_fraction"] < one_level["fraction"] < 1
    assert "geometric, private 1, items of 64" in stdout


def test_suffix_sharing_smoke(tmp_path: Path) -> None:
    report, stdout = run_smoke("suffix_sharing.py", tmp_path)
    assert [r["length"] for r in report["reports"]] == [2, 4]
    for r in report["reports"]:
        assert r["rows"] == report["beams"] == 16
        assert 0 < r["unique_read_fraction"] <= 1
        assert len(r["distinct_at_depth"]) == r["length"]
        assert r["distinct_at_depth"][-1] == 16  # every row owns its newest token
    assert "L=   4 rows=16" in stdout
