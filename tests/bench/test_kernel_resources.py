"""`bench/kernel_resources.py` and `bench/offline_target.py`: the project's kernels compiled for
a GPU on this CPU-only machine, through their own launch wrappers, and read back from the SASS.
What is asserted are properties of the compiled code that follow from the source and the
target (Hopper's warpgroup products, the FP8 tile's widening instructions), never a time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.bench.smoke import BENCH, load_bench_module

# No module-level import of triton here: collection imports this file before
# tests/kernels/conftest.py turns Triton's interpreter on, and triton.language's own jit
# functions (tl.cdiv, ...) decorated before that break every interpreted kernel test after it.


def compiling_env(**extra: str) -> dict[str, str]:
    """This process's environment without Triton's interpreter, which the kernel tests switch
    on for the whole run (tests/kernels/conftest.py): what compiles runs in a child process."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return env | extra


def run_resources(tmp_path: Path, *args: str) -> tuple[dict, subprocess.CompletedProcess]:
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "kernel_resources.py", *args],
        cwd=BENCH, env=compiling_env(OUT=str(out)), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    report = {}
    if done.returncode == 0:
        report = json.loads((out / "kernel_resources.json").read_text())
    return report, done


def prefix_rows(report: dict, fp8: bool) -> dict[str, dict]:
    """The prefix kernel's compiled variants by their dot dtype (KV_FP8 as given)."""
    return {
        row["variant"].split("KV_DOT ")[1].split(",")[0]: row
        for row in report["rows"]
        if row["kernel"] == "prefix_kernel" and f"KV_FP8 {fp8}" in row["variant"]
    }


def test_the_fp8_prefix_kernels_compile_for_hopper(tmp_path: Path) -> None:
    report, done = run_resources(tmp_path, "--small", "--only", "fp8kv")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert report["env"]["capability"] == 90
    fp8 = prefix_rows(report, fp8=True)
    assert set(fp8) == {"bf16", "fp16"}, report["rows"]
    for row in fp8.values():
        assert row["HGMMA"] > 0 and row["HMMA"] == 0  # sm_90: warpgroup products
        assert row["LDGSTS"] > 0  # the prompt tiles stream through asynchronous copies
        assert 0 < row["registers"] <= 255 and row["shared_bytes"] > 0
        assert row["blocks_per_sm_registers"] >= 1 and row["blocks_per_sm_shared"] >= 1
    # e4m3 widens to fp16 in one conversion; to bf16 it takes a second (F2F) per value
    assert fp8["fp16"]["F2F"] == 0 < fp8["bf16"]["F2F"]
    # a bf16 cache needs no widening at all
    plain = next(iter(prefix_rows(report, fp8=False).values()))
    assert plain["F2F"] == 0 and plain["F2FP"] < fp8["fp16"]["F2FP"]
    assert "| prefix_kernel | BLOCK_R" in done.stdout


def test_an_ampere_target_compiles_per_warp_products_and_refuses_fp8(tmp_path: Path) -> None:
    """sm_80 has no warpgroup products and no e4m3: the bf16 cache's kernels compile with HMMA,
    the FP8 cases are reported as not compiling, and the run goes on."""
    report, done = run_resources(tmp_path, "--small", "--only", "fp8kv", "--capability", "80")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    plain = prefix_rows(report, fp8=False)
    assert plain and all(row["HMMA"] > 0 and row["HGMMA"] == 0 for row in plain.values())
    assert not prefix_rows(report, fp8=True)
    assert len(report["errors"]) == 3  # FP8 with bf16, fp16 and the default dots
    assert all("fp8e4nv" in error["error"] for error in report["errors"])
    assert "does not compile for sm_80" in done.stdout


def test_smoke_is_refused(tmp_path: Path) -> None:
    """`--smoke` would switch kernels.py to the interpreter, where nothing compiles."""
    _, done = run_resources(tmp_path, "--smoke")
    assert done.returncode != 0 and "--small" in done.stderr


DRIVER_CHECK = """
import torch, triton, triton.language as tl
from triton.runtime.driver import driver
import offline_target as offline

@triton.jit
def double(x_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + i, tl.load(x_ptr + i, mask=i < n) * 2, mask=i < n)

before = driver._active
x = torch.ones(100)
with offline.offline_target(90) as log:
    double[(2,)](x, 100, BLOCK=64)
    double[(4,)](x, 100, BLOCK=32)
    double[(4,)](x, 100, BLOCK=32)
assert driver._active is before
assert torch.equal(x, torch.ones(100))  # compiled, never run
seen = [(a.kernel, a.constexprs["BLOCK"], a.grid) for a in log.launches]
assert seen == [("double", 64, (2, 1, 1))] + [("double", 32, (4, 1, 1))] * 2, seen
assert all(a.resources.registers > 0 and a.resources.instructions > 0 for a in log.launches)
assert len(log.distinct()) == 2
print("driver check ok")
"""


def test_the_driver_is_restored_and_each_launch_recorded(tmp_path: Path) -> None:
    script = tmp_path / "driver_check.py"
    script.write_text(DRIVER_CHECK)
    done = subprocess.run(
        [sys.executable, str(script)], cwd=BENCH, env=compiling_env(PYTHONPATH=str(BENCH)),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0 and "driver check ok" in done.stdout, done.stderr[-3000:]


def test_a_model_dtype_cache_compiles_one_prefix_variant_whatever_the_width(
    tmp_path: Path,
) -> None:
    """The FP8 dot rule (fp16 from 4 items a group) reads nothing over a cache in q's dtype, so
    a narrow and a wide group (1 and 8 items of 32 rows) launch one compiled prefix kernel
    there; over FP8 the rule still gives the wide group fp16."""
    report, done = run_resources(
        tmp_path, "--only", "prefix", "--prefix-shapes", "4x32x40,1x256x40", "--prefix-rows",
        "32", "--prefix-tiles", "auto", "--prefix-dots", "auto",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    prefix = [row for row in report["rows"] if row["kernel"] == "prefix_kernel"]
    plain = {row["variant"] for row in prefix if "KV_FP8 False" in row["variant"]}
    assert len(plain) == 1, plain
    fp8 = {
        row["shape"].split(":")[0]: row["variant"]
        for row in prefix
        if "KV_FP8 True" in row["variant"]
    }
    assert "KV_DOT bf16" in fp8["4x32x40"] and "KV_DOT fp16" in fp8["1x256x40"], fp8


def fp8_prefix_variants(tmp_path: Path, tiles: str, dots: str, marker: str) -> dict[bool, dict]:
    """The FP8 prefix kernel's compiled variants at Qwen3-1.7B's heads (one 64-row request over
    a 128-token prompt), keyed by whether their variant's label names `marker`."""
    report, done = run_resources(
        tmp_path, "--only", "prefix", "--prefix-shapes", "1x64x128", "--prefix-rows", "auto",
        "--prefix-tiles", tiles, "--prefix-dots", dots,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return {
        marker in row["variant"]: row
        for row in report["rows"]
        if row["kernel"] == "prefix_kernel" and "KV_FP8 True" in row["variant"]
    }


def test_a_register_cap_reaches_the_compiler(tmp_path: Path) -> None:
    """`--prefix-tiles 32:4:3:128`: the FP8 prefix kernel with fp16 dots, which the compiler
    gives more than 128 registers a thread, is held to 128 (4 blocks of 4 warps an SM)."""
    fp8 = fp8_prefix_variants(tmp_path, "32:4:3,32:4:3:128", "fp16", "registers 128")
    assert fp8[False]["registers"] > 128 >= fp8[True]["registers"], fp8
    assert fp8[True]["blocks_per_sm_registers"] == 4 > fp8[False]["blocks_per_sm_registers"]
    # the cap's price: a few spills, paid in the prompt loop
    assert (
        fp8[False]["loop_spills"]
        == 0
        < fp8[True]["loop_spills"]
        <= fp8[True]["STL"] + fp8[True]["LDL"]
    )


def test_spills_count_as_in_a_loop_between_a_backward_branch_and_its_target() -> None:
    offline = load_bench_module("offline_target")
    sass = [
        (0x10, "STL", " [R1], R2 "),  # before the loop
        (0x20, "LDS", " R4, [R5] "),  # the loop's first instruction (the branch's target)
        (0x30, "STL", " [R1+0x8], R6 "),
        (0x40, "BRA", " 0x60 "),  # forward: not a loop
        (0x50, "LDL", " R6, [R1+0x8] "),
        (0x60, "BRA", " 0x20 "),  # backward: the loop 0x20 .. 0x60
        (0x70, "LDL", " R2, [R1] "),  # after it
        (0x80, "BRA", " 0x80 "),  # the end's trap: branches to itself
    ]
    assert offline.loop_spills(sass) == 2


def test_fp8_queries_multiply_on_fp8_tensor_cores_and_widen_no_key(tmp_path: Path) -> None:
    """`--prefix-dots fp8` (cascade_decode_packed's fp8_queries): Q K^T compiles to Hopper's FP8
    warpgroup products (QGMMA) over K as stored, so only V is widened."""
    fp8 = fp8_prefix_variants(tmp_path, "32:4:3", "fp16,fp8", "QK_FP8 True")
    assert fp8[True]["fp8_products"] > 0 == fp8[False]["fp8_products"], fp8
    assert fp8[True]["QGMMA"] > 0 and fp8[True]["HGMMA"] > 0  # P V stays 16-bit
    assert fp8[True]["F2FP"] < fp8[False]["F2FP"]  # K's tiles are not widened


def test_fp8_probabilities_prefill_multiplies_only_fp8_and_transposes_nothing(
    tmp_path: Path,
) -> None:
    """`--only fp8prefill`'s FP8-probabilities arm: both of the prefill's products compile to
    FP8 warpgroup products, and V, handed over transposed (`keys_contiguous`), reaches shared
    memory by asynchronous copies as K does: no more shared-memory stores than the
    FP8-queries prefill's (a transposition through registers would add dozens)."""
    report, done = run_resources(tmp_path, "--only", "fp8prefill", "--small")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    prefills = {
        (("QK_FP8 True" in r["variant"]), ("PV_FP8 True" in r["variant"])): r
        for r in report["rows"]
        if r["kernel"] == "_prefill_kernel"
    }
    both, queries = prefills[(True, True)], prefills[(True, False)]
    assert both["HGMMA"] == 0 < both["QGMMA"] and queries["HGMMA"] > 0, prefills
    assert both["STS"] <= queries["STS"] and both["LDGSTS"] >= queries["LDGSTS"], prefills


def test_the_shared_suffix_kernel_is_held_to_its_register_cap_by_default(tmp_path: Path) -> None:
    """W1's shared-suffix kernel at Qwen3-0.6B's heads: by default at most SHARED_MAX_REGISTERS a
    thread (5 blocks of 4 warps an SM); `--shared-registers 0` is the compiler's own count, more
    registers and fewer resident blocks."""
    from widebeam.kernels.attention.triton_cascade import SHARED_MAX_REGISTERS

    report, done = run_resources(tmp_path, "--only", "tree", "--shared-registers", "auto,0")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    shared = {
        "registers" in row["variant"]: row
        for row in report["rows"]
        if row["kernel"] == "shared_suffix_kernel"
    }
    capped, free = shared[True], shared[False]
    assert f"registers {SHARED_MAX_REGISTERS}" in capped["variant"]
    assert capped["registers"] <= SHARED_MAX_REGISTERS < free["registers"], shared
    assert capped["blocks_per_sm_registers"] > free["blocks_per_sm_registers"]
