"""`bench/kernels.py --smoke --only padding`: one batch packed as a tight bucket, a bucket
padded with work items and one with a second split decodes what the torch reference decodes
(the bench's own check); no time is asserted (it depends on the machine)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tests.bench.smoke import load_bench_module, run_smoke


def test_padding_cases_match_the_reference(tmp_path: Path) -> None:
    # One timed call, no warm-up: each case's Triton kernel runs twice (timed, then checked)
    # instead of four times; under the interpreter its times mean nothing anyway.
    report, stdout = run_smoke(
        "kernels.py", tmp_path, "--only", "padding", "--reps", "1", "--warmup", "0", timeout=300
    )
    assert report["env"]["reps"] == 1
    rows = report["rows"]
    assert [row["kernel"].split(":")[0] for row in rows] == [
        "cascade decode (tight",
        "cascade decode (padded",
        "cascade decode (2 splits",
    ]
    assert "64 work items" in rows[1]["kernel"] and "2 splits)" in rows[2]["kernel"]
    assert all(row["check"] == "ok" for row in rows), rows
    assert "| cascade decode (padded: 64 work items" in stdout


def test_tree_cases_match_the_reference(tmp_path: Path) -> None:
    """`--only tree`: a beam-tree batch decoded with every row alone and with the shared-suffix
    plan (items of 16 and of 8 rows, the shared kernel's registers capped by default and the
    compiler's) matches the
    torch reference; the plan has fewer items than rows (the beams share), more with narrower
    items, and its own time is a row."""
    report, _ = run_smoke(
        "kernels.py", tmp_path, "--only", "tree", "--reps", "1", "--warmup", "0",
        "--tree-rows", "auto,8", "--shared-registers", "auto,0", timeout=300,
    )  # fmt: skip
    rows = report["rows"]
    kernels = [row["kernel"] for row in rows]
    assert kernels[0] == "cascade decode (rows alone)"
    assert kernels[5].startswith("suffix_tree plan")
    items = []
    for label, width in ((kernels[1], 16), (kernels[3], 8)):
        found = re.search(rf"split 8:8, (\d+) items of {width} rows", label)
        assert found is not None, label
        items.append(int(found.group(1)))
    assert 0 < items[0] < items[1] < 40
    # each plan also with the compiler's registers
    assert kernels[1].endswith("warps auto, registers auto)")
    assert kernels[2].endswith("warps auto, registers the compiler's)")
    assert all(row["check"] == "ok" for row in rows[:5]), rows


def test_fp8_kv_cases_match_the_reference(tmp_path: Path) -> None:
    """`--only fp8kv`: the model-dtype cache, then FP8 with the prefix kernel's dots in bf16, in
    fp16 and by default, each within tolerance of the torch reference over the same values,
    its error printed."""
    report, _ = run_smoke(
        "kernels.py", tmp_path, "--only", "fp8kv", "--reps", "1", "--warmup", "0", timeout=300
    )
    kernels = [row["kernel"] for row in report["rows"]]
    assert kernels == [
        "cascade decode, float32 KV",
        "cascade decode, FP8 KV, prefix dots bfloat16",
        "cascade decode, FP8 KV, prefix dots float16",
        "cascade decode, FP8 KV, prefix dots default",
    ]
    for row in report["rows"]:
        assert re.fullmatch(r"ok, max \|err\| \d\.\d\de-\d\d", row["check"]), row["check"]


def test_fp8_prefill_cases_match_the_reference(tmp_path: Path) -> None:
    """`--only fp8prefill`: the KV write + prefill over a model-dtype cache, then over an FP8
    one with the rows widened by the prefill and by the write, with FP8 queries, and with FP8
    queries and probabilities, each within tolerance of the torch reference over the values the
    cache holds (the queries and probabilities rounded as the kernel rounds them)."""
    report, _ = run_smoke(
        "kernels.py", tmp_path, "--only", "fp8prefill", "--reps", "1", "--warmup", "0",
        timeout=300,
    )  # fmt: skip
    kernels = [row["kernel"] for row in report["rows"]]
    assert kernels == [
        "KV write + prefill, float32 KV",
        "KV write + prefill, FP8 KV, rows FP8, widened by the prefill",
        "KV write + prefill, FP8 KV, rows widened by the write",
        "KV write + prefill, FP8 KV, rows widened by the write, FP8 queries",
        "KV write + prefill, FP8 KV, rows FP8, FP8 queries and probabilities",
    ]
    for row in report["rows"]:
        assert re.fullmatch(r"ok, max \|err\| \d\.\d\de-\d\d", row["check"]), row["check"]


def test_prefix_tile_cases_match_the_reference(tmp_path: Path) -> None:
    """`--only prefix`: the prefix kernel at each (rows per item x BLOCK_N:warps:stages) given,
    over the model-dtype cache and over FP8, each within tolerance of the torch reference; the
    labels name the tile the kernel ran (M = rows x GQA), defaults resolved."""
    report, _ = run_smoke(
        "kernels.py", tmp_path, "--only", "prefix", "--reps", "1", "--warmup", "0",
        "--prefix-rows", "auto", "--prefix-tiles", "auto,32:4:2:128", "--prefix-dots",
        "auto,fp16,fp8", timeout=300,
    )  # fmt: skip
    kernels = [row["kernel"] for row in report["rows"]]
    assert [k.split(" (")[0] for k in kernels] == ["prefix float32 KV"] * 2 + ["prefix fp8 KV"] * 6
    # smoke heads (4 q / 2 kv), 40 rows the widest request: auto = 32 rows an item, M = 64
    assert kernels[0].startswith("prefix float32 KV (M 64, N auto 64, warps auto 4, stages auto 3")
    assert kernels[1].startswith("prefix float32 KV (M 64, N 32, warps 4, stages 2")
    assert kernels[1].endswith(", registers 128)") and "dots" not in kernels[1]
    assert kernels[3].startswith("prefix fp8 KV (M 64, N 32, warps 4, stages 2")
    assert kernels[3].endswith(", registers 128, dots auto)")
    assert kernels[5].endswith(", registers 128, dots fp16)")
    assert kernels[7].endswith(", registers 128, dots fp8)")  # checked against rounded queries
    assert all(row["check"].startswith("ok") for row in report["rows"]), report["rows"]


def test_prefix_shapes_by_name_or_requests_rows_prompt() -> None:
    """`--prefix-shapes` takes the table's names or REQUESTSxROWSxPROMPT; anything else stops
    the run with a message naming both forms, before any kernel runs."""
    # The bench script's module name is also an installed package's (Hugging Face's `kernels`,
    # which transformers imports): the bench module must not stay in sys.modules after this.
    installed = sys.modules.get("kernels")
    try:
        kernels = load_bench_module("kernels")
        assert kernels.custom_shape("4x1000x2451") == [(1000, 2451, 2)] * 4
        for bad in ("4x1000", "0x1x2", "ax1x2", "W9", "2x3x-4"):
            with pytest.raises(SystemExit, match="REQUESTSxROWSxPROMPT"):
                kernels.custom_shape(bad)
    finally:
        if installed is None:
            sys.modules.pop("kernels", None)
        else:
            sys.modules["kernels"] = installed
