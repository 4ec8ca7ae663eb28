"""Timeline of one timed phase: where the wall time goes between the host's engine phases and
the device's kernels (torch profiler; run on the GPU machine).

`traced(engine, name)` labels the engine's phases (admit, prefill, prepare, decode launch,
select, resolve, finish) for the duration of the block, profiles it, writes the Chrome trace
to `$OUT/trace_<name>.json.gz` and prints: wall time, the device's busy time (union of kernel
intervals), the host time per phase, the largest device-idle gaps with the phase the host was
in, and the top kernels. `host_clock(engine, name, requests)` times the same phases on the
host without a profiler.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import shutil
import tempfile
import time
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from widebeam.services.decoder.engine import Engine

PHASES = {
    "admit": ("scheduler", "admit"),
    "prefill": ("", "_prefill"),
    "prepare": ("", "_prepare_decode"),
    "launch_decode": ("runner", "launch_decode"),
    "select": ("", "_select"),
    "resolve": ("", "_resolve"),
    "finish": ("", "_answer"),  # building a finished request's answer
}


Wrapper = Callable[[str, Callable], Callable]


def _labelled(label: str, fn: Callable) -> Callable:
    def call(*args: object, **kwargs: object) -> object:
        with record_function(f"phase:{label}"):
            return fn(*args, **kwargs)

    return call


@contextlib.contextmanager
def _phase_labels(engine: Engine, wrap: Wrapper = _labelled) -> Iterator[None]:
    patched = []
    for label, (owner_name, method) in PHASES.items():
        owner = getattr(engine, owner_name) if owner_name else engine
        own = vars(owner).get(method)  # another recorder's wrapper, when they nest
        setattr(owner, method, wrap(label, getattr(owner, method)))
        patched.append((owner, method, own))
    try:
        yield
    finally:
        for owner, method, own in reversed(patched):
            if own is None:
                delattr(owner, method)  # the instance attribute goes; the class's method shows
            else:
                setattr(owner, method, own)


def _union_ms(spans: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for start, stop in sorted(spans):
        if stop > end:
            total += stop - max(start, end)
            end = stop
    return total / 1000


def summarize(events: list[dict]) -> str:
    """The report of a Chrome trace's events (times in microseconds)."""
    kernels = [e for e in events if e.get("cat") == "kernel" and "dur" in e]
    # The host's own ranges ("gpu_user_annotation" mirrors them on the device's timeline).
    phases = [
        e
        for e in events
        if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("phase:")
    ]
    if not kernels:
        return "no kernels recorded"
    spans = [(k["ts"], k["ts"] + k["dur"]) for k in kernels]
    begin = min(min(s for s, _ in spans), min((p["ts"] for p in phases), default=spans[0][0]))
    end = max(max(e for _, e in spans), max((p["ts"] + p["dur"] for p in phases), default=0))
    lines = [
        f"wall {(end - begin) / 1000:.2f} ms, device busy {_union_ms(spans):.2f} ms, "
        f"{len(kernels)} kernels"
    ]
    by_phase: dict[str, list[float]] = defaultdict(list)
    for p in phases:
        by_phase[p["name"][6:]].append(p["dur"] / 1000)
    for name, durs in sorted(by_phase.items(), key=lambda kv: -sum(kv[1])):
        lines.append(f"  host {name:14s} {sum(durs):8.2f} ms in {len(durs)} calls")
    ordered = sorted(spans)
    gaps, reach = [], ordered[0][1]
    for start, stop in ordered[1:]:
        if start > reach:
            gaps.append((start - reach, reach))
        reach = max(reach, stop)
    lines.append(f"device idle between kernels {sum(g for g, _ in gaps) / 1000:.2f} ms")
    for gap, at in sorted(gaps, reverse=True)[:12]:
        inside = [p["name"][6:] for p in phases if p["ts"] <= at < p["ts"] + p["dur"]]
        lines.append(f"  gap {gap / 1000:7.3f} ms at +{(at - begin) / 1000:8.2f} ms in {inside}")
    by_kernel: dict[str, list[float]] = defaultdict(list)
    for k in kernels:
        by_kernel[k["name"][:90]].append(k["dur"] / 1000)
    lines.append("top kernels (ms, calls):")
    for name, durs in sorted(by_kernel.items(), key=lambda kv: -sum(kv[1]))[:20]:
        lines.append(f"  {sum(durs):8.2f} {len(durs):6d}  {name}")
    return "\n".join(lines)


# torch.cuda.memory_stats() counters that show the caching allocator going to the driver
# (cudaMalloc / cudaFree, and frees that synchronize every stream first).
ALLOCATOR_COUNTERS = (
    "num_device_alloc",
    "num_device_free",
    "num_sync_all_streams",
    "num_alloc_retries",
)


@contextlib.contextmanager
def host_clock(
    engine: Engine, name: str, requests: int, sync_debug: bool = False
) -> Iterator[None]:
    """The host's time per engine phase without a profiler (a profiler changes what it times:
    the tenth and eighteenth sessions saw FP8's W2 single request faster under it), the
    allocator's trips to the driver, and with `sync_debug` the operations that made the host
    wait for the device (torch's sync debug mode, by call site)."""
    spent: dict[str, list[float]] = defaultdict(list)

    def clocked(label: str, fn: Callable) -> Callable:
        def call(*args: object, **kwargs: object) -> object:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[label].append((time.perf_counter() - t0) * 1000)

        return call

    before = torch.cuda.memory_stats() if torch.cuda.is_available() else {}
    with contextlib.ExitStack() as stack:
        caught = stack.enter_context(warnings.catch_warnings(record=True))
        warnings.simplefilter("always")
        if sync_debug:
            torch.cuda.set_sync_debug_mode("warn")
            stack.callback(torch.cuda.set_sync_debug_mode, "default")
        stack.enter_context(_phase_labels(engine, clocked))
        t0 = time.perf_counter()
        yield
        wall = (time.perf_counter() - t0) * 1000
    after = torch.cuda.memory_stats() if torch.cuda.is_available() else {}
    lines = [f"--- host clock {name}: {wall / requests:.2f} ms a request over {requests}"]
    for label, durs in sorted(spent.items(), key=lambda kv: -sum(kv[1])):
        lines.append(
            f"  {label:14s} {sum(durs) / requests:8.2f} ms a request, {len(durs) / requests:6.1f} "
            f"calls, longest {max(durs):7.2f} ms"
        )
    counters = {k: after.get(k, 0) - before.get(k, 0) for k in ALLOCATOR_COUNTERS}
    lines.append("  allocator: " + ", ".join(f"{k} {v}" for k, v in counters.items()))
    sites: dict[str, int] = defaultdict(int)
    for w in caught:
        sites[f"{Path(w.filename).name}:{w.lineno} {str(w.message)[:60]}"] += 1
    for site, count in sorted(sites.items(), key=lambda kv: -kv[1])[:15]:
        lines.append(f"  warning x{count}: {site}")
    print("\n".join(lines), flush=True)


@contextlib.contextmanager
def traced(engine: Engine, name: str) -> Iterator[None]:
    with (
        _phase_labels(engine),
        profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof,
    ):
        yield
    out = Path(os.environ.get("OUT", "bench-out"))
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(raw))
        events = json.loads(raw.read_text()).get("traceEvents", [])
        with raw.open("rb") as src, gzip.open(out / f"trace_{name}.json.gz", "wb") as dst:
            shutil.copyfileobj(src, dst)
    print(f"--- trace {name}\n{summarize(events)}", flush=True)


@contextlib.contextmanager
def recorded(engine: Engine, name: str, requests: int, args: argparse.Namespace) -> Iterator[None]:
    """What `harness.add_run_args`' options ask of a timed phase of `requests` requests: its
    timeline (`--trace`), its host clock (`--host-clock`, where the script offers it)."""
    with contextlib.ExitStack() as stack:
        if args.trace:
            stack.enter_context(traced(engine, name))
        if getattr(args, "host_clock", False):
            stack.enter_context(host_clock(engine, name, requests, args.sync_debug))
        yield
