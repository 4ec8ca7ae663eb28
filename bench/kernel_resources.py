"""What kernels.py's cases compile to on a GPU, read on a machine without one.

    python kernel_resources.py [--only fp8kv,prefix,...] [--capability 90] [--small]
        [kernels.py's case options: --prefix-tiles, --prefix-shapes, ...] [--tag SUFFIX]

Each case of the chosen groups runs once under `offline_target` (bf16 model dtype, as on the
device): the project's launch wrappers pick their kernels, tiles and constexprs as they would on
the GPU, each launch compiles for the target, and nothing runs. For every kernel variant a case
launched: registers per thread, stack bytes (spills), dynamic shared memory, the blocks an SM
holds by registers and by shared memory, and the SASS instruction counts that matter in these
kernels (tensor-core products, asynchronous copies, FP8 widening conversions, local-memory
spills). `--small` takes kernels.py's smoke shapes (a quick check of the script).

What a variant compiles to is a lead for a device call (a spill in the loop, a register count
that halves the blocks an SM holds, conversions an FP8 tile adds), never a timing: the numbers
that decide go through kernels.py on the device.
"""

from __future__ import annotations

import argparse
import os
import sys

if "--smoke" in sys.argv:  # kernels.py would switch the interpreter on: nothing would compile
    sys.exit("kernel_resources.py compiles for the GPU: use --small for tiny shapes")
# Kernels decorated under Triton's interpreter run on the CPU instead of compiling; this must
# hold before any kernel module is imported (a test run sets it for its own kernels).
os.environ.pop("TRITON_INTERPRET", None)

import kernels
import torch
from harness import environment, markdown_table, write_json
from offline_target import OPCODES, CompiledLaunch, LaunchLog, offline_target
from triton.compiler.errors import CompilationError

# Constexprs that tell the variants of one kernel apart in the table
SHOWN = (
    "BLOCK_R", "BLOCK_N", "BLOCK_S", "BLOCK_Q", "KV_FP8", "KV_DOT", "QK_FP8", "PV_FP8", "TREE",
    "TMA",
)  # fmt: skip


def variant_label(launch: CompiledLaunch) -> str:
    shown = [
        f"{name} {str(value).removeprefix('triton.language.')}"
        for name, value in launch.constexprs.items()
        if name in SHOWN
    ]
    options = [f"warps {launch.warps}", f"stages {launch.stages}"]
    if launch.max_registers:
        options.append(f"registers {launch.max_registers}")
    return ", ".join([*shown, *options])


def row(case: kernels.Case, launch: CompiledLaunch, capability: int) -> dict[str, object]:
    res = launch.resources
    by_regs, by_shared = res.blocks_per_sm(launch.warps, capability)
    return {
        "case": case.kernel,
        "shape": case.shape,
        "kernel": launch.kernel,
        "variant": variant_label(launch),
        "grid": list(launch.grid),
        "registers": res.registers,
        "stack_bytes": res.stack_bytes,
        "shared_bytes": res.shared_bytes,
        "blocks_per_sm_registers": by_regs,
        "blocks_per_sm_shared": by_shared,
        "instructions": res.instructions,
        "loop_spills": res.loop_spills,
        "fp8_products": res.fp8_products,
        **{op: res.opcodes.get(op, 0) for op in OPCODES},
    }


TABLE = ("kernel", "variant", "registers", "stack_bytes", "shared_bytes",
         "blocks_per_sm_registers", "blocks_per_sm_shared", "instructions", "HGMMA",
         "fp8_products", "LDGSTS", "F2F", "F2FP", "STL", "LDL", "loop_spills")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    kernels.add_case_args(parser)
    parser.add_argument(
        "--capability", type=int, default=90, help="compute capability, e.g. 90 (H100 / H200)"
    )
    parser.add_argument("--small", action="store_true", help="kernels.py's smoke shapes")
    parser.add_argument("--tag", default="", help="suffix of the result JSON's name")
    args = parser.parse_args()
    unknown = set(args.only.split(",")) - set(kernels.GROUPS)
    if unknown:
        parser.error(f"unknown groups {sorted(unknown)}; choose from {', '.join(kernels.GROUPS)}")
    if torch.cuda.is_available():
        parser.error("run it where no CUDA device is in use (it replaces Triton's driver)")
    args.smoke = args.small  # the groups' name for their tiny shapes
    kernels.DTYPE = torch.bfloat16  # the device's model dtype, whatever this host runs
    rows: list[dict[str, object]] = []
    errors: list[dict[str, object]] = []
    with offline_target(args.capability) as log:
        for group in args.only.split(","):
            for case in kernels.GROUPS[group](args):
                first = len(log.launches)
                try:
                    case.triton()
                except CompilationError as exc:  # e.g. FP8 e4m3 before compute capability 8.9
                    reason = str(exc).strip().splitlines()[-1]
                    errors.append({"group": group, "case": case.kernel, "shape": case.shape,
                                   "error": reason})  # fmt: skip
                    print(f"[{group}] {case.kernel} | {case.shape}: does not compile for "
                          f"sm_{args.capability}: {reason}", flush=True)  # fmt: skip
                    continue
                compiled = LaunchLog(log.launches[first:]).distinct()
                for launch in compiled:
                    rows.append(row(case, launch, args.capability) | {"group": group})
                print(
                    f"[{group}] {case.kernel} | {case.shape}: {len(compiled)} kernels", flush=True
                )
    for shape in dict.fromkeys(r["shape"] for r in rows):
        print(f"\n### {shape}\n")
        cases = [r for r in rows if r["shape"] == shape]
        for case in dict.fromkeys(r["case"] for r in cases):
            print(f"{case}\n")
            chosen = [[r[c] for c in TABLE] for r in cases if r["case"] == case]
            print(markdown_table(TABLE, chosen))
            print()
    env = environment() | {"capability": args.capability, "small": args.small}
    write_json("kernel_resources" + args.tag, {"env": env, "rows": rows, "errors": errors})


if __name__ == "__main__":
    main()
