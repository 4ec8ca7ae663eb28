"""Shared pieces of the benchmark scripts: model shapes, request drivers, timing, reports.

Models have the real architectures and random bf16 weights (speed depends on shape, not on
weight values); EOS is ignored so every request runs its full length.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import statistics
import subprocess
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from cache_dir import bench_cache

from widebeam.kernels.attention.suffix_tree import SplitRule
from widebeam.services.decoder.config import BeamExpansion, DType, EngineConfig
from widebeam.services.decoder.engine import Engine
from widebeam.services.decoder.model.transformer import CausalLM
from widebeam.services.decoder.precision_args import add_precision_arguments
from widebeam.services.decoder.requests.results import RequestOutput
from widebeam.services.decoder.requests.spec import GenerationRequest, Normalization
from widebeam.services.decoder.testing.tiny_model import write_tiny_model

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
QWEN_VOCAB = 151936
SHAPES = {
    "qwen3-0.6b": dict(
        hidden_size=1024,
        intermediate_size=3072,
        num_layers=28,
        num_heads=16,
        num_kv_heads=8,
        head_dim=128,
        tie_word_embeddings=True,
    ),
    "qwen3-1.7b": dict(
        hidden_size=2048,
        intermediate_size=6144,
        num_layers=28,
        num_heads=16,
        num_kv_heads=8,
        head_dim=128,
        tie_word_embeddings=True,
    ),
}


def model_dir(shape: str, sid_levels: tuple[int, ...] | None = None) -> Path:
    """Build (once per machine) an HF directory of `shape` with random bf16 weights."""
    tag = shape + ("-sid" + "x".join(map(str, sid_levels)) if sid_levels else "")
    root = bench_cache() / tag
    if not (root / "config.json").exists():
        torch.manual_seed(0)
        write_tiny_model(
            root,
            base_vocab=QWEN_VOCAB - 3,
            dtype=DType.BFLOAT16,
            seed=0,
            sid_levels=sid_levels,
            max_position_embeddings=40960,
            **SHAPES[shape],
        )
    return root


def add_engine_args(parser: argparse.ArgumentParser) -> None:
    """The engine variant under test, so one device call can time before and after."""
    parser.add_argument(
        "--attention", default="auto", choices=["auto", "torch", "triton", "flashinfer"]
    )
    parser.add_argument(
        "--expansion", default=BeamExpansion.STREAMED, choices=[e.value for e in BeamExpansion]
    )
    add_precision_arguments(parser, "the model's dtype")
    parser.add_argument("--no-graphs", action="store_true", help="eager decode steps")
    parser.add_argument("--no-overlap", action="store_true", help="synchronous scheduling")
    parser.add_argument(
        "--no-prefix-cache", action="store_true", help="no prompt-prefix KV reuse across requests"
    )
    parser.add_argument(
        "--no-prefill-graphs", action="store_true", help="eager prefill at exact shapes"
    )
    parser.add_argument(
        "--max-prefill-graph-tokens",
        type=int,
        help="the largest prefill batch replayed from a CUDA graph (default: the engine's)",
    )
    parser.add_argument(
        "--prefill-graph-split",
        action="store_true",
        help="a prefill batch past the graph limit runs as graph-sized batches (not eagerly)",
    )
    parser.add_argument(
        "--no-shared-suffix",
        action="store_true",
        help="every row reads its whole generated suffix alone (shared_suffix_attention off)",
    )
    parser.add_argument(
        "--tree-split",
        help="PRIVATE_MIN:ALIGN, the Triton backend's shared-suffix split rule (default 8:8)",
    )


def add_normalization_arg(parser: argparse.ArgumentParser) -> None:
    """For the scripts whose requests take a normalisation (W2's and W3's)."""
    parser.add_argument(
        "--normalization",
        default=Normalization.VOCAB,
        choices=[n.value for n in Normalization],
        help="constrained requests' log-prob normalisation (sid: the SID tokens only)",
    )


def add_run_args(
    parser: argparse.ArgumentParser, *, profile: bool, host_clock: bool = False
) -> None:
    """What a script with timed phases is asked to record: the result's tag (which also names
    its traces), a timeline of each timed phase; with `profile` a torch profile of the phases
    listed (the scripts whose phases have names to list: widths or contexts), with
    `host_clock` the host's time per engine phase without a profiler."""
    parser.add_argument("--tag", default="", help="suffix of the result JSON's and traces' names")
    parser.add_argument(
        "--trace",
        action="store_true",
        help="timeline of the timed phases (tracing.py): W1's and W2's single requests, every "
        "W3 and W4 throughput phase",
    )
    if host_clock:
        parser.add_argument(
            "--host-clock",
            action="store_true",
            help="each timed phase's host time per engine phase (calls, longest) and the "
            "allocator's trips to the driver, no profiler (tracing.host_clock)",
        )
        parser.add_argument(
            "--sync-debug",
            action="store_true",
            help="with --host-clock: list the operations that waited for the device",
        )
    if not profile:
        return
    parser.add_argument(
        "--profile",
        type=profile_value,
        nargs="?",
        const=FIRST_PHASE,
        default=None,
        metavar="PHASES",
        help="torch-profile timed phases: the first (no value), or those listed (comma-separated "
        "widths n, or W2's contexts)",
    )
    parser.add_argument(
        "--profile-apart",
        action="store_true",
        help="profile --profile's phases in a second pass after the timed one (half its "
        "requests), so the results' rates are never the profiler's",
    )


FIRST_PHASE = "first"
PROFILE_ROWS = 30


def _profile_phases(profile: str) -> set[int] | None:
    """The phases a `--profile` value lists (None: FIRST_PHASE); ValueError if malformed."""
    if profile == FIRST_PHASE:
        return None
    try:
        return {int(part) for part in profile.split(",")}
    except ValueError:
        raise ValueError(f"--profile takes comma-separated integers, got {profile!r}") from None


def profile_value(value: str) -> str:
    """argparse's check of `--profile PHASES`: a malformed list is refused before the model
    loads, not when the first phase asks."""
    try:
        _profile_phases(value)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return value


def profiled(profile: str | None, phase: int, first: int) -> bool:
    """Whether `--profile`'s value names `phase` (a width or context; `first`: the bench's
    first timed phase)."""
    if profile is None:
        return False
    try:
        phases = _profile_phases(profile)
    except ValueError as err:
        raise SystemExit(str(err)) from None
    return phase == first if phases is None else phase in phases


def profile_timed(args: argparse.Namespace, phase: int, first: int) -> bool:
    """Whether the timed pass of `phase` runs under the profiler (`--profile` names it and
    `--profile-apart` is off)."""
    return profiled(args.profile, phase, first) and not args.profile_apart


def profile_after(args: argparse.Namespace, phase: int, first: int) -> bool:
    """Whether `phase` gets a second, profiled pass after its timed one (`--profile-apart`)."""
    return profiled(args.profile, phase, first) and args.profile_apart


def second_pass_profile(label: str) -> contextlib.AbstractContextManager[None]:
    """The profiler over `--profile-apart`'s second pass of the phase `label`."""
    return maybe_profile(True, f"{label}, a second pass after the timed one")


@contextlib.contextmanager
def maybe_profile(enabled: bool, label: str) -> Iterator[None]:
    """With `enabled`, print the top device and host operators of the block (torch profiler)."""
    if not enabled:
        yield
        return
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        yield
    table = prof.key_averages().table(
        sort_by="cuda_time_total", row_limit=PROFILE_ROWS, max_name_column_width=70
    )
    print(f"--- profile: {label}\n{table}", flush=True)
    # The profile's event objects (hundreds of thousands, linked both ways) are garbage now:
    # collect them here, not in a pass inside the next timed phase (call 2 of the eighteenth
    # session had 0.4-1.2 s gen2 passes in the phases after a profiled one).
    del prof, table
    gc.collect()


def load_options(args: argparse.Namespace) -> dict[str, object]:
    """`CausalLM.from_pretrained`'s options for the variant under test (a model loaded apart
    and handed to the engine must be loaded as `engine_options` configure the engine)."""
    return {
        "quantization": args.quantization,
        "fp8_accumulation": args.fp8_accumulation,
        "head_quantization": args.head_quantization,
    }


def engine_options(args: argparse.Namespace) -> dict[str, object]:
    return {
        "attention_backend": args.attention,
        **load_options(args),
        "kv_dtype": args.kv_dtype,
        "kv_fp8_queries": args.kv_fp8_queries,
        "kv_fp8_probabilities": args.kv_fp8_probabilities,
        "beam_expansion": args.expansion,
        "cuda_graphs": not args.no_graphs,
        "prefill_graphs": not args.no_prefill_graphs,
        "prefill_graph_split": args.prefill_graph_split,
        **(
            {"max_prefill_graph_tokens": args.max_prefill_graph_tokens}
            if args.max_prefill_graph_tokens
            else {}
        ),
        "shared_suffix_attention": not args.no_shared_suffix,
        **({"tree_split": args.tree_split} if args.tree_split else {}),
        "overlap_scheduling": not args.no_overlap,
        "prefix_cache": not args.no_prefix_cache,
    }


class GcTimer:
    """Wall time of the cyclic garbage collector's passes, by generation."""

    def __init__(self) -> None:
        self.seconds = [0.0, 0.0, 0.0]
        self.passes = [0, 0, 0]
        self._start = 0.0
        gc.callbacks.append(self._on_gc)

    def stop(self) -> None:
        gc.callbacks.remove(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.seconds[info["generation"]] += time.perf_counter() - self._start
            self.passes[info["generation"]] += 1

    def summary(self) -> str:
        parts = [f"gen{g}: {n} passes {1000 * t:.1f} ms" for g, (n, t) in
                 enumerate(zip(self.passes, self.seconds, strict=True))]  # fmt: skip
        return f"gc {', '.join(parts)}; tracked objects {len(gc.get_objects())}"


def make_engine(
    path: Path,
    max_rows: int,
    max_kv_slots: int,
    model: CausalLM | None = None,
    dtype: str = DType.BFLOAT16,
    tree_split: str | None = None,  # "PRIVATE_MIN:ALIGN" for the Triton backend
    **kwargs: object,
) -> Engine:
    config = EngineConfig(
        model_dir=str(path),
        device=DEVICE,
        dtype=dtype,
        max_rows=max_rows,
        max_kv_slots=max_kv_slots,
        **kwargs,
    )
    engine = Engine(config, model=model)
    if tree_split:  # a kernel variant, not a user setting: set on the backend the engine built
        backend = engine.runner.backend
        if not hasattr(backend, "tree_split"):
            raise SystemExit(f"--tree-split needs the triton backend, not {backend.name}")
        backend.tree_split = SplitRule(*map(int, tree_split.split(":")))  # type: ignore[attr-defined]
    # As the decoder server does: the objects alive now (modules, weights' wrappers, graphs'
    # owners) leave the collector's view, so a full collection only walks what requests made.
    gc.freeze()
    return engine


@dataclass
class RunStats:
    latencies_ms: list[float]
    wall_s: float
    # (graphs, seconds) captured inside the run, where the driver counts them (`drive`): a
    # capture inside a timed phase distorts it, and its results then say so
    captured: tuple[int, float] | None = None

    def summary(self) -> dict[str, float]:
        lat = sorted(self.latencies_ms)
        pick = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))]  # noqa: E731
        counted = {}
        if self.captured is not None:
            counted = {"phase_captures": self.captured[0], "phase_capture_s": self.captured[1]}
        return {
            "n": len(lat),
            "mean_ms": statistics.fmean(lat),
            "p50_ms": pick(0.5),
            "p90_ms": pick(0.9),
            "p99_ms": pick(0.99),
            "throughput_rps": len(lat) / self.wall_s,
            **counted,
        }


# Request ids of a rehearsal (`rehearse`): below every id a bench times or warms up with.
REHEARSAL_IDS = -100_000


def rehearse(
    engine: Engine, make: Callable[[int], GenerationRequest], num: int, concurrency: int
) -> None:
    """A timed phase's pattern once, untimed, before it is timed: `num` requests
    (`make(REHEARSAL_IDS - i)`) in a closed loop of `concurrency`. Its staggered arrivals and
    its drain meet the batch shapes the timed loop will, so their CUDA graphs are captured
    before the clock starts; full waves alone meet only the first wave's shapes."""
    drive(engine, [make(REHEARSAL_IDS - i) for i in range(num)], None, concurrency)


def drive(
    engine: Engine,
    requests: list[GenerationRequest],
    qps: float | None,
    concurrency: int,
    check: Callable[[RequestOutput], None] | None = None,
) -> RunStats:
    """Open-loop arrivals every 1/qps s (all at once when qps is None), at most `concurrency`
    in flight; latency runs from when a request is handed to the engine until it finishes.
    `check` sees every output after the timed loop (a client's own checking is not the
    engine's time)."""
    waiting = deque(requests)
    started: dict[str, float] = {}
    latencies: list[float] = []
    outputs: list[RequestOutput] = []
    captured = graph_captures(engine)
    collector = GcTimer()
    t0 = time.perf_counter()
    next_arrival = 0.0
    while waiting or started:
        now = time.perf_counter() - t0
        while waiting and len(started) < concurrency and (qps is None or next_arrival <= now):
            req = waiting.popleft()
            engine.submit(req)
            started[req.request_id] = time.perf_counter()
            next_arrival += 0 if qps is None else 1.0 / qps
        if not started:
            time.sleep(max(0.0, next_arrival - now))
            continue
        for out in engine.step():
            if out.error is not None:
                raise RuntimeError(f"{out.request_id}: {out.error}")
            if check is not None:
                outputs.append(out)
            latencies.append((time.perf_counter() - started.pop(out.request_id)) * 1000)
    elapsed = time.perf_counter() - t0
    collector.stop()
    if check is not None:
        for out in outputs:
            check(out)
    if collector.passes[2]:
        print(f"[gc] {len(requests)} requests: {collector.summary()}")
    after = graph_captures(engine)
    inside = (after[0] - captured[0], after[1] - captured[1])
    if inside[0]:  # a capture inside a timed phase distorts it: say so
        print(f"[graphs] {len(requests)} requests: {inside[0]} captures, {inside[1]:.2f} s")
    return RunStats(latencies, elapsed, inside)


def graph_captures(engine: Engine) -> tuple[int, float]:
    """(captures, seconds spent capturing) over the engine's graph caches so far."""
    runner = engine.runner
    # getattr: the same harness also measures older commits (no expander, no capture timing).
    parts = (runner.graphs, runner.prefill_graphs, getattr(runner, "expander", None))
    caches = [getattr(part, "cache", None) for part in parts]
    live = [c for c in caches if c is not None]
    return sum(c.captures for c in live), sum(getattr(c, "capture_seconds", 0.0) for c in live)


def matmul_tflops(n: int = 8192, reps: int = 20) -> float:
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        a @ b
    end.record()
    torch.cuda.synchronize()
    return 2 * n**3 * reps / (start.elapsed_time(end) / 1000) / 1e12


def environment() -> dict[str, str]:
    commit = (
        os.environ.get("WIDEBEAM_COMMIT")
        or subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
    )
    return {
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else "none (CPU)",
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d"),
        "commit": commit or "unknown",
    }


def write_json(name: str, data: object) -> None:
    out = Path(os.environ.get("OUT", "bench-out"))
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(data, indent=2))


# The columns that set a workload's time against transformers and the FLOP floor.
VERSUS_HEADERS = ["HF ms", "vs HF", "floor ms", "linear-graph ms", "of floor"]


def versus_cells(ms: float, hf_ms: float | None, floor_ms: float, graph_ms: float) -> list[object]:
    """The VERSUS_HEADERS cells of a row timed at `ms`: HF's time and how much faster this is
    ("-" where HF was not run), the floor, the linear layers' graph time, the floor's share."""
    return [
        hf_ms if hf_ms else "-",
        f"{hf_ms / ms:.1f}x" if hf_ms else "-",
        floor_ms,
        graph_ms,
        f"{100 * floor_ms / ms:.1f}%",
    ]


def markdown_table(headers: list[str], rows: list[list[object]]) -> str:
    fmt = lambda v: f"{v:.1f}" if isinstance(v, float) else str(v)  # noqa: E731
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)
