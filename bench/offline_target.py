"""Compile the project's Triton kernels for a GPU on a machine without one, and read what each
compiled to: registers, spilled bytes, shared memory, and the instruction mix of its SASS.

`offline_target(capability)` makes Triton's active driver one that compiles for that GPU
(sm_90 = H100 / H200 by default) and launches nothing: the project's own launch wrappers run as
they do on the device, over CPU tensors, so each launch compiles its kernel with the argument
specialization (alignment, divisible strides, the constexprs the wrapper picks) that a real
launch would get, and records a `CompiledLaunch` instead of running it. The kernels' outputs
stay whatever their buffers held: read the launches, never the tensors.

The SASS comes from the CUDA tools Triton ships (`cuobjdump`), so this needs no GPU, no driver
and no CUDA toolkit. What it cannot show is time: a spill or a longer instruction mix is a
lead for a device call, not a measurement.
"""

from __future__ import annotations

import collections
import contextlib
import os
import re
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field

import triton
from triton.backends.compiler import GPUTarget
from triton.runtime.driver import driver

# Shared memory per compute capability (bytes; the CUDA guide's table): what one block may use,
# and what an SM holds for all its blocks (each block also takes 1 KiB the runtime reserves)
MAX_SHARED_PER_BLOCK = {80: 166912, 86: 101376, 89: 101376, 90: 232448, 100: 232448, 120: 101376}
SHARED_PER_SM = {80: 167936, 86: 102400, 89: 102400, 90: 233472, 100: 233472, 120: 102400}
RESERVED_SHARED_PER_BLOCK = 1024
REGISTERS_PER_SM = 65536
# SASS opcodes worth counting in an attention kernel: tensor-core products (HGMMA: Hopper's
# warpgroup MMA over 16-bit operands, QGMMA: over FP8 ones, HMMA: the older per-warp one),
# asynchronous copies global -> shared (LDGSTS)
# and bulk tensor copies (UTMALDG), plain loads, shared-memory traffic, conversions (F2F, F2FP:
# where FP8 values are widened), spills (STL / LDL: local memory), special functions (MUFU: exp2)
OPCODES = ("HGMMA", "QGMMA", "HMMA", "LDGSTS", "UTMALDG", "LDG", "STS", "LDS", "LDSM", "F2F",
           "F2FP", "STL", "LDL", "MUFU")  # fmt: skip
_RESOURCES = re.compile(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)")
_INSTRUCTION = re.compile(
    r"^\s+/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P[T\d]+\s+)?([A-Z][A-Z0-9_]*)([^;]*);", re.M
)
_BRANCH_TARGET = re.compile(r"^\s*(0x[0-9a-f]+)")


@dataclass(frozen=True)
class KernelResources:
    """What one compiled kernel holds per thread and block, and its SASS instruction counts."""

    registers: int  # per thread
    stack_bytes: int  # per thread: spills and call frames (local memory)
    static_shared: int  # bytes a block declares statically
    dynamic_shared: int  # bytes Triton's launch asks for (its tiles' buffers)
    instructions: int  # SASS instructions in the binary
    opcodes: dict[str, int]  # OPCODES -> count (static, not executed: loops count once)
    loop_spills: int  # STL / LDL inside a loop's body (where each iteration pays them)
    fp8_products: int  # tensor-core products over e4m3 operands (QGMMA, or any MMA ... E4M3)

    @property
    def shared_bytes(self) -> int:
        return self.static_shared + self.dynamic_shared

    def blocks_per_sm(self, warps: int, capability: int) -> tuple[int, int]:
        """(by registers, by shared memory) the blocks of `warps` warps an SM can hold at once.
        Registers are allocated per warp in units of 256."""
        per_warp = -(-self.registers * 32 // 256) * 256
        per_block = self.shared_bytes + RESERVED_SHARED_PER_BLOCK
        shared = SHARED_PER_SM.get(capability, 102400)
        return REGISTERS_PER_SM // (per_warp * warps), shared // per_block


@dataclass(frozen=True)
class CompiledLaunch:
    kernel: str
    constexprs: dict[str, object]  # the launch's constexpr arguments, by name
    warps: int
    stages: int
    max_registers: int | None  # the launch's register cap (Triton's maxnreg), if any
    grid: tuple[int, int, int]
    resources: KernelResources


@dataclass
class LaunchLog:
    launches: list[CompiledLaunch] = field(default_factory=list)

    def distinct(self) -> list[CompiledLaunch]:
        """One launch per compiled variant (kernel, constexprs and launch options), first seen
        first."""
        seen: dict[tuple[str, str], CompiledLaunch] = {}
        for launch in self.launches:
            options = (launch.warps, launch.stages, launch.max_registers)
            key = repr((sorted(launch.constexprs.items()), options))
            seen.setdefault((launch.kernel, key), launch)
        return list(seen.values())


def tool(name: str) -> str:
    """A CUDA binary tool shipped in Triton's wheel (`ptxas`, `cuobjdump`, `nvdisasm`)."""
    path = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: this Triton install ships no {name}")
    return path


def read_resources(cubin: bytes, dynamic_shared: int) -> KernelResources:
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        usage = _run(tool("cuobjdump"), "--dump-resource-usage", f.name)
        sass = _run(tool("cuobjdump"), "-sass", f.name)
    found = _RESOURCES.search(usage)
    if found is None:
        raise ValueError(f"cuobjdump gave no resource line:\n{usage}")
    registers, stack, shared, _local = map(int, found.groups())
    instructions = [(int(at, 16), op, rest) for at, op, rest in _INSTRUCTION.findall(sass)]
    counts = collections.Counter(op for _, op, _ in instructions)
    return KernelResources(
        registers=registers,
        stack_bytes=stack,
        static_shared=shared,
        dynamic_shared=dynamic_shared,
        instructions=len(instructions),
        opcodes={op: counts[op] for op in OPCODES if counts[op]},
        loop_spills=loop_spills(instructions),
        fp8_products=sum(op.endswith("MMA") and "E4M3" in rest for _, op, rest in instructions),
    )


def loop_spills(instructions: list[tuple[int, str, str]]) -> int:
    """Local-memory stores and loads that lie inside a loop: between a backward branch's
    target and the branch itself ((address, opcode, operands) in address order)."""
    loops = []
    for at, op, rest in instructions:
        target = _BRANCH_TARGET.match(rest.strip()) if op == "BRA" else None
        if target is not None and int(target.group(1), 16) < at:
            loops.append((int(target.group(1), 16), at))
    return sum(
        op in ("STL", "LDL") and any(start <= at <= end for start, end in loops)
        for at, op, _ in instructions
    )


def _run(*command: str) -> str:
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout


class _Binary:
    """What `load_binary` hands Triton as the kernel's function: its resources."""

    def __init__(self, resources: KernelResources) -> None:
        self.resources = resources


class _Utils:
    def __init__(self, capability: int) -> None:
        self.capability = capability

    def get_device_properties(self, _device: int) -> dict[str, int]:
        return {"max_shared_mem": MAX_SHARED_PER_BLOCK.get(self.capability, 101376)}

    def load_binary(
        self, _name: str, cubin: bytes, shared: int, _device: int
    ) -> tuple[None, _Binary, int, int, int]:
        resources = read_resources(cubin, shared)
        # (module, function, registers, spills, most threads a block may have)
        return None, _Binary(resources), resources.registers, resources.stack_bytes, 1024


class OfflineDriver:
    """A Triton driver that compiles for `GPUTarget("cuda", capability, 32)` and records each
    launch in `log` instead of running it."""

    def __init__(self, capability: int, log: LaunchLog) -> None:
        self.target = GPUTarget("cuda", capability, 32)
        self.utils = _Utils(capability)
        self.log = log

    @staticmethod
    def is_active() -> bool:
        return False

    def get_current_target(self) -> GPUTarget:
        return self.target

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, _device: int | None = None) -> int:
        return 0

    def get_active_torch_device(self) -> object:
        import torch

        return torch.device("cpu")

    def map_python_to_cpp_type(self, ty: str) -> str:
        raise NotImplementedError("an offline target builds no launcher")

    def get_benchmarker(self) -> object:
        raise NotImplementedError("an offline target times nothing")

    def launcher_cls(self, src: object, metadata: object) -> object:
        names = src.fn.arg_names  # type: ignore[attr-defined]
        constexprs = {names[path[0]]: value for path, value in src.constants.items()}  # type: ignore[attr-defined]
        kernel = src.fn.__name__  # type: ignore[attr-defined]
        log = self.log

        def launch(grid_0: int, grid_1: int, grid_2: int, _stream: int, function: _Binary,
                   *_rest: object) -> None:  # fmt: skip
            log.launches.append(
                CompiledLaunch(
                    kernel, constexprs, metadata.num_warps, metadata.num_stages,  # type: ignore[attr-defined]
                    getattr(metadata, "maxnreg", None), (grid_0, grid_1, grid_2),
                    function.resources,
                )
            )  # fmt: skip

        return launch


@contextlib.contextmanager
def offline_target(capability: int = 90) -> Iterator[LaunchLog]:
    """Within: Triton compiles for compute capability `capability` (90: H100 / H200) and records
    each launch in the yielded log. Kernels compiled before entering stay in their caches
    (keyed by device 0), so enter before the first launch of a process."""
    log = LaunchLog()
    previous = driver._active  # None until a driver was first asked for (none on a CPU host)
    driver.set_active(OfflineDriver(capability, log))  # type: ignore[arg-type]
    try:
        yield log
    finally:
        driver._active = previous
