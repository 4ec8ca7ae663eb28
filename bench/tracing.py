"""Timeline of one timed phase: where the wall time goes between the host's engine phases and
the device's kernels (torch profiler; run on the GPU machine).

`traced(engine, name)` labels the engine's phases (admit, prefill, prepare, decode launch,
select, resolve, finish) for the duration of the block, profiles it, writes the Chrome trace
to `$OUT/trace_<name>.json.gz` and prints: wall time, the device's busy time (union of kernel
intervals), the host time per phase, the largest device-idle gaps with the phase the host was
in, and the top kernels.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import shutil
import tempfile
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

from torch.profiler import ProfilerActivity, profile, record_function

from widebeam.services.decoder.engine import Engine

PHASES = {
    "admit": ("scheduler", "admit"),
    "prefill": ("", "_prefill"),
    "prepare": ("", "_prepare_decode"),
    "launch_decode": ("runner", "launch_decode"),
    "select": ("", "_select"),
    "resolve": ("", "_resolve"),
    "finish": ("", "_finish"),
}


def _labelled(label: str, fn: Callable) -> Callable:
    def call(*args: object, **kwargs: object) -> object:
        with record_function(f"phase:{label}"):
            return fn(*args, **kwargs)

    return call


@contextlib.contextmanager
def _phase_labels(engine: Engine) -> Iterator[None]:
    patched = []
    for label, (owner_name, method) in PHASES.items():
        owner = getattr(engine, owner_name) if owner_name else engine
        setattr(owner, method, _labelled(label, getattr(owner, method)))
        patched.append((owner, method))
    try:
        yield
    finally:
        for owner, method in patched:
            delattr(owner, method)  # the instance attribute goes; the class's method shows


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
