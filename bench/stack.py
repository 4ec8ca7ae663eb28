"""The whole serving path in one run (issue 23): the same workload-3 requests (widths 50 / 512 /
1000, 60-item histories, the same prompts, the same concurrency) through the engine in-process,
the decoder's gRPC `Recommend`, the gateway's REST `/v1/recommend` and its OpenAI chat route;
then an open-loop mixed-width sweep through REST (several client processes) from 25% to 250%
of the measured capacity. Reports throughput and its ratio to the engine's, p50 / p99, status
counts, the CPU time per answered request of the decoder and gateway processes (each hop's
host cost), and the decoder's CUDA-graph captures after ready, per phase
(`widebeam_decoder_graph_captures_total` with phase="serving"; the target is 0).

    python bench/stack.py [--quick]                     # one H200: W3 model and catalog
    python bench/stack.py --smoke                       # CPU, tiny model: seconds, a smoke test

The engine runs first, then the servers (the engine idle beside them on the same device), then
the engine again, `--rounds` times: each round's service rates are divided by the mean of the
engine's passes before and after it (the median over rounds is reported too), and the engine's
last ÷ first rate ("engine drift") says how much the device or host moved over the run. Every
phase sends histories no earlier phase sent, so no path reads its prompts from a prefix cache
an earlier one filled; the sweep's requests are all new too. The chat route runs in round 0
only; its prompt is the history's SID text in the gateway's chat template, so it has a few more
tokens than Recommend's; its decoding (constrained, beam = n) is the same. The services'
closed-loop clients run in processes of their own (`closed_loop_clients.py`; one per client by
default, as callers on machines of their own), so one client's host time never delays
another's next request.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
import multiprocessing
import os
import random
import re
import signal
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import torch
from cache_dir import add_cache_argument
from catalogs import random_catalog
from closed_loop_clients import GRPC_RECOMMEND, ClientProcesses
from e2e import DecoderProcess, free_port
from gpu_clocks import GpuSampler
from harness import RunStats, drive, environment, make_engine, markdown_table, model_dir
from harness import write_json as write_result
from host_cpu import CpuSample, process_table, window_cores
from host_probe import probe_ms
from replicas import GatewayProcess
from timelines import TIMELINE_HEADERS, DecoderTimelines, EngineTimeline, timeline_cells

from widebeam.services.catalog.sid_layout import SidLayout
from widebeam.services.decoder.engine import Engine
from widebeam.services.decoder.requests.spec import GenerationRequest
from widebeam.services.decoder.runner.capture_counts import CapturePhase
from widebeam.services.decoder.runner.step_counts import StepCounts
from widebeam.services.decoder.server.prompting import history_prompt
from widebeam.services.decoder.testing.tiny_model import write_tiny_model

W3_LEVELS = (512, 512, 512)  # workload 3's catalog: 430k SIDs, codebook 512
SMOKE_LEVELS = (16, 16, 16)
HISTORY_ITEMS = 60
SWEEP_MIX = (0.5, 0.3, 0.2)  # share of each width (narrowest first) in the open-loop sweep
LATENCY_PARTS = ("decoder", "gateway", "outside")  # of a sweep's answered latency
CPU_COLUMNS = ("engine", "decoder", "decoder API", "gateway")  # host CPU per request, by process
HOST_CPU_KEYS = ("host", "ours", "others", "steal")  # `host_cpu.window_cores`, in its order
SERVING_CAPTURES = re.compile(
    r'^widebeam_decoder_graph_captures_total\{kind="(\w+)",phase="serving"\} ([0-9.e+]+)$', re.M
)


@dataclass
class Workload:
    model: Path
    catalog: Path
    layout: SidLayout
    sids: dict[str, tuple[int, ...]]  # item id -> SID codes
    items: list[str]  # the catalog's item ids, histories' population
    token_text: dict[int, str]  # the tokenizer's added tokens (the SID tokens among them)
    # width -> timed requests per closed-loop phase: what the engine answers in --phase-seconds
    counts: dict[int, int] = field(default_factory=dict)
    rng: random.Random = field(default_factory=lambda: random.Random(0))

    def fresh_histories(self, count: int) -> list[list[str]]:
        """Histories no phase has sent yet: each phase and each sweep request gets its own, so
        no path finds its prompts in a prefix cache a path before it filled (a reused history
        would skip its prefill there, and that path would look faster than it is)."""
        return [self.rng.sample(self.items, HISTORY_ITEMS) for _ in range(count)]

    def prompt(self, history: list[str]) -> list[int]:
        return history_prompt(self.layout, [self.sids[item] for item in history])

    def chat_text(self, history: list[str]) -> str:
        """The history's SID tokens as text (the chat template adds the begin token's place)."""
        return "".join(self.token_text[t] for t in self.prompt(history)[:-1])


@dataclass
class Phase:
    path: str
    width: int
    latencies_ms: list[float] = field(default_factory=list)  # answered requests only
    statuses: dict[str, int] = field(default_factory=dict)
    wall_s: float = 0.0
    rnd: int = 0  # the round (engine: its pass; 0 .. --rounds)
    captures: int = 0  # the decoder's graph captures during the phase, its warm-up loop included
    # CPU time of each server process (its worker processes included) over the timed loop, per
    # answered request: where each hop's host time goes
    cpu_ms_per_request: dict[str, float] = field(default_factory=dict)
    # How the timed loop's requests batched in the engine (`StepCounts`): requests per prefill
    # forward, and streamed beam steps per request (a request of a lockstep cohort of c shares
    # each step with c - 1 others: 1 / c of a step per token)
    batching: dict[str, float] = field(default_factory=dict)
    timeline: dict = field(default_factory=dict)  # with --timeline: the timed loop's summary
    gpu: dict = field(default_factory=dict)  # the timed loop's SM clock, power, temperature
    host_probe_ms: float = 0.0  # `host_probe.probe_ms()` right before the timed loop
    # Busy cores over the timed loop: the host's, this bench's process tree's (servers and
    # clients included), the others' and the hypervisor's steal (`host_cpu.window_cores`)
    host_cpu: dict[str, float] = field(default_factory=dict)
    started_unix: float = 0.0  # the timed loop's start (wall clock: `host_watch.py`'s series)

    def row(self) -> dict[str, object]:
        ok = RunStats(self.latencies_ms or [0.0], self.wall_s or 1.0).summary()
        return {
            "path": self.path,
            "width": self.width,
            "round": self.rnd,
            "answered_rps": len(self.latencies_ms) / self.wall_s if self.wall_s else 0.0,
            "p50_ms": ok["p50_ms"],
            "p99_ms": ok["p99_ms"],
            "statuses": dict(sorted(self.statuses.items())),
            "captures": self.captures,
            "cpu_ms_per_request": self.cpu_ms_per_request,
            "batching": self.batching,
            "timeline": self.timeline,
            "gpu": self.gpu,
            "host_probe_ms": self.host_probe_ms,
            "host_cpu": self.host_cpu,
            "started_unix": self.started_unix,
        }


def batching(
    before: StepCounts, after: StepCounts, answered: int, wall_s: float
) -> dict[str, float]:
    """How the phase's requests shared the engine's forwards, and how busy it was."""
    prefills = max(after.prefill_forwards - before.prefill_forwards, 1)
    decodes = after.decode_forwards - before.decode_forwards
    answered = max(answered, 1)
    prefilled = max(after.prefilled_requests - before.prefilled_requests, 1)
    taken = max(after.inbox_requests - before.inbox_requests, 1)
    inbox_s = after.inbox_seconds - before.inbox_seconds
    return {
        "requests_per_prefill": (after.prefilled_requests - before.prefilled_requests) / prefills,
        # prompt tokens computed per request: lower than the prompt where a prefix was cached
        "prefill_tokens_per_request": (after.prefill_tokens - before.prefill_tokens) / prefilled,
        "rows_per_decode": (after.decode_rows - before.decode_rows) / max(decodes, 1),
        "decodes_per_request": decodes / answered,
        "expansions_per_request": (after.beam_expansions - before.beam_expansions) / answered,
        "busy": (after.step_seconds - before.step_seconds) / max(wall_s, 1e-9),
        # a server's intakes that waited for a group's next requests, per request
        "group_waits_per_request": (after.group_waits - before.group_waits) / answered,
        # a server's requests' mean wait in its inbox before the engine took them in (0 for the
        # in-process engine, whose loop submits each request at once)
        "inbox_ms_per_request": 1000 * inbox_s / taken,
        # prefill forwards launched op by op (past the graph limit), and batches split instead
        "eager_prefills_per_request": (after.eager_prefills - before.eager_prefills) / answered,
        "split_prefills_per_request": (after.split_prefills - before.split_prefills) / answered,
    }


BATCHING_COLUMNS = {  # `batching`'s keys, as the table names them
    "requests_per_prefill": "prefill batch",
    "prefill_tokens_per_request": "prefill tok/req",
    "rows_per_decode": "rows/decode",
    "decodes_per_request": "decodes/req",
    "expansions_per_request": "expansions/req",
    "busy": "engine busy",
    "group_waits_per_request": "group waits/req",
    "inbox_ms_per_request": "inbox ms/req",
    "eager_prefills_per_request": "eager prefills/req",
    "split_prefills_per_request": "split prefills/req",
}


def smoke_model(cache: str | Path) -> Path:
    """The CPU benches' tiny SID model (SMOKE_LEVELS), written into `cache` once."""
    root = Path(cache) / "stack-smoke-model"
    if not (root / "config.json").exists():
        write_tiny_model(root, seed=0, sid_levels=SMOKE_LEVELS)
    return root


def build_workload(args: argparse.Namespace) -> Workload:
    if args.smoke:
        model, catalog = smoke_model(args.cache), random_catalog(400, SMOKE_LEVELS)
    else:
        model = args.model or model_dir("qwen3-1.7b", sid_levels=W3_LEVELS)
        catalog = args.catalog or random_catalog(430_000, W3_LEVELS)
    layout = SidLayout.from_tokenizer(model)
    if layout is None:
        raise SystemExit(f"{model} has no SID tokens")
    sids = {}
    for line in catalog.open():
        entry = json.loads(line)
        sids[entry["item_id"]] = tuple(entry["sid"])
    added = json.loads((model / "tokenizer.json").read_text())["added_tokens"]
    token_text = {int(t["id"]): str(t["content"]) for t in added}
    return Workload(model, catalog, layout, sids, list(sids), token_text)


# ----- in-process engine ----------------------------------------------------------------------
ENGINE = "engine"


def start_engine(args: argparse.Namespace, work: Workload) -> Engine:
    engine = make_engine(
        work.model, args.max_rows, args.max_kv_slots, catalog_path=str(work.catalog),
        capture_at_start=True, capture_beam_widths=tuple(args.widths),
        admission_ratio=args.admission_ratio,
        admission_max_wait_steps=args.admission_max_wait_steps,
        **graph_limit(args),
    )  # fmt: skip
    warm_s = engine.warm_up()
    engine.mark_ready()
    print(f"[engine] start-up captures {sum(engine.runner.capture_counts.counts.values())} "
          f"in {warm_s:.1f} s", flush=True)  # fmt: skip
    return engine


def graph_limit(args: argparse.Namespace) -> dict[str, int | bool]:
    """`max_prefill_graph_tokens`, `prefill_graph_split`, `admit_before_flags`,
    `intake_after_flags` and `answers_after_launch` where the command line sets them (else
    EngineConfig's), for the engine and the decoder alike."""
    limit = args.max_prefill_graph_tokens
    split = {"prefill_graph_split": True} if args.prefill_graph_split else {}
    for switch in ("admit_before_flags", "intake_after_flags", "answers_after_launch"):
        if getattr(args, switch) is not None:
            split[switch] = getattr(args, switch)
    return split if limit is None else {"max_prefill_graph_tokens": limit, **split}


def engine_phases(
    args: argparse.Namespace, work: Workload, sampler: GpuSampler, engine: Engine, rnd: int
) -> list[Phase]:
    """One closed-loop phase per width through the engine in this process, pass `rnd`. The
    first (0) sizes every path's timed phase from its warm-up's rate; pass r + 1 runs after the
    servers' round r (the decoder idle meanwhile) and times as many: each round of the services
    is compared with the engine's passes on both sides of it, so a device or host that ran
    faster late in the run than early shows as the engine's own spread instead of moving every
    ratio one way."""
    steps = work.layout.path_length(include_begin=False)  # the prompt ends with the begin token
    phases = []
    for width in args.widths:

        def requests(tag: str, count: int, width: int = width) -> list[GenerationRequest]:
            return [
                GenerationRequest(
                    f"{tag}-{width}-{i}", tuple(work.prompt(h)), beam_width=width, n=width,
                    max_new_tokens=steps, eos_token_id=(), constrained=True,
                )
                for i, h in enumerate(work.fresh_histories(count))
            ]  # fmt: skip

        warm = drive(engine, requests(f"engine{rnd}-warm", 2 * args.concurrency), None,
                     args.concurrency)  # fmt: skip
        if rnd == 0:
            # The warm-up's rate sizes every path's timed phase for this width: a fixed count
            # would time 0.2 s at n = 50 and several seconds at n = 1000.
            rate = len(warm.latencies_ms) / max(warm.wall_s, 1e-9)
            work.counts[width] = max(args.requests, round(rate * args.phase_seconds))
        cpu_before = time.process_time()  # every thread of this process: the engine's host cost
        steps_before = dataclasses.replace(engine.step_counts)
        timed = requests(f"engine{rnd}-timed", work.counts[width])
        probe = probe_ms()
        host_before = CpuSample.take(os.getpid())
        started, started_unix = time.monotonic(), time.time()
        timeline: dict = {}
        if args.timeline:
            with EngineTimeline(engine) as recorded:
                stats = drive(engine, timed, None, args.concurrency)
            timeline = recorded.summary()
        else:
            stats = drive(engine, timed, None, args.concurrency)
        n = len(stats.latencies_ms)
        phase = Phase(ENGINE, width, stats.latencies_ms, {"ok": n}, stats.wall_s, rnd=rnd)
        phase.gpu = sampler.window(started, time.monotonic())
        phase.host_probe_ms = probe
        phase.host_cpu = window_cores(host_before, CpuSample.take(os.getpid()))
        phase.started_unix = started_unix
        phase.timeline = timeline
        phase.cpu_ms_per_request = {"engine": (time.process_time() - cpu_before) * 1000 / n}
        phase.batching = batching(steps_before, engine.step_counts, n, stats.wall_s)
        phases.append(phase)
        print(phase.row() | {"timeline": {}}, flush=True)
    return phases


# ----- clients ------------------------------------------------------------------------------
def recommend_body(history: list[str], width: int) -> dict:
    # The gateway would exclude the history's items by default and ask again at twice the beam
    # when that leaves fewer than n: the decoder's work would differ from Recommend's.
    return {"history": history, "n": width, "beam_width": width, "exclude_history": False}


def chat_body(work: Workload, model_name: str, history: list[str], width: int) -> dict:
    return {
        "model": model_name,
        "messages": [{"role": "user", "content": work.chat_text(history)}],
        "n": width,
        "beam_width": width,
        "max_tokens": work.layout.path_length(include_begin=True) + 1,  # the path, then EOS
        "constrained": True,
    }


def process_cpu_s(pid: int, own: bool = True, children: bool = True) -> float:
    """User + system CPU seconds of a process and/or its live children (a gateway's workers, a
    decoder's API processes), from /proc (Linux); 0.0 where /proc cannot be read."""
    return sum(
        process.own_s
        for other, process in process_table().items()
        if (own and other == pid) or (children and process.parent == pid)
    )


def service_phases(
    args: argparse.Namespace,
    work: Workload,
    clients: ClientProcesses,
    model_name: str,
    metrics_url: str,
    servers: dict[str, tuple[int, bool, bool]],  # name -> (pid, its own CPU, its children's)
    sampler: GpuSampler,
    timelines: DecoderTimelines | None = None,
    rnd: int = 0,
    with_chat: bool | None = None,
) -> list[Phase]:
    """Round `rnd` of the servers' closed-loop phases: gRPC and REST recommend per width, and
    the chat route too where `with_chat` (default: in round 0 only; it has no target of its own
    to pin down)."""
    phases: list[Phase] = []
    for width in args.widths:
        count = work.counts[width]
        payloads: dict[str, tuple[str, Callable[[list[str]], object]]] = {
            GRPC_RECOMMEND: ("", lambda h: h),
            "REST /v1/recommend": ("/v1/recommend", lambda h, w=width: recommend_body(h, w)),
            "REST chat": (
                "/v1/chat/completions", lambda h, w=width: chat_body(work, model_name, h, w)
            ),
        }  # fmt: skip
        if not (rnd == 0 if with_chat is None else with_chat):
            del payloads["REST chat"]
        for path, (route, payload) in payloads.items():
            # The warm-up's requests first, then the timed ones: all new to the decoder.
            sent = [payload(h) for h in work.fresh_histories(args.concurrency + count)]
            before = sum(serving_captures(metrics_url).values())
            clients.run(path, route, sent[: args.concurrency], width)
            cpu = {name: process_cpu_s(*server) for name, server in servers.items()}
            steps_before = step_counts(metrics_url)
            probe = probe_ms()  # (this process idle meanwhile: the servers are too)
            if timelines is not None:
                timelines.start()
            host_before = CpuSample.take(os.getpid())
            started, started_unix = time.monotonic(), time.time()
            outcome, wall = clients.run(path, route, sent[args.concurrency :], width)
            host_cpu = window_cores(host_before, CpuSample.take(os.getpid()))
            phase = Phase(path, width, outcome.latencies_ms, outcome.statuses, wall, rnd=rnd)
            phase.gpu = sampler.window(started, time.monotonic())
            phase.host_probe_ms = probe
            phase.host_cpu = host_cpu
            phase.started_unix = started_unix
            if timelines is not None:
                phase.timeline = timelines.stop()
            answered = max(len(phase.latencies_ms), 1)
            phase.cpu_ms_per_request = {
                name: (process_cpu_s(*server) - cpu[name]) * 1000 / answered
                for name, server in servers.items()
            }
            phase.batching = batching(steps_before, step_counts(metrics_url), answered, wall)
            phase.captures = sum(serving_captures(metrics_url).values()) - before
            phases.append(phase)
            print(phase.row(), flush=True)
    return phases


# ----- open-loop sweep ------------------------------------------------------------------------
SERVER_TIMING = re.compile(r"(\w+);dur=([0-9.]+)")


@dataclass
class SweepAnswers:
    """One sweep client's outcome at one load: each answered request's latency as the client
    saw it and the parts of it the gateway's Server-Timing header names."""

    latencies_ms: list[float] = field(default_factory=list)
    app_ms: list[float] = field(default_factory=list)  # in the gateway's app
    decoder_ms: list[float] = field(default_factory=list)  # in its decoder calls
    statuses: dict[str, int] = field(default_factory=dict)


def _sweep_client(
    url: str, bodies: list[dict], rate: float, duration_s: float, seed: int
) -> SweepAnswers:
    """One client process: Poisson arrivals at `rate` for `duration_s`; answered latencies."""

    async def run() -> SweepAnswers:
        rng = random.Random(seed)
        answers = SweepAnswers()
        statuses = answers.statuses

        async def one(http: httpx.AsyncClient, at: float, body: dict) -> None:
            await asyncio.sleep(max(0.0, at - (time.perf_counter() - t0)))
            start = time.perf_counter()
            try:
                response = await http.post("/v1/recommend", json=body)
                status = str(response.status_code)
            except httpx.HTTPError as exc:
                status = type(exc).__name__
            statuses[status] = statuses.get(status, 0) + 1
            if status == "200":
                answers.latencies_ms.append((time.perf_counter() - start) * 1000)
                parts = dict(SERVER_TIMING.findall(response.headers.get("server-timing", "")))
                answers.app_ms.append(float(parts.get("app", "nan")))
                answers.decoder_ms.append(float(parts.get("decoder", "nan")))

        arrivals, at = [], rng.expovariate(rate)
        while at < duration_s:
            arrivals.append(at)
            at += rng.expovariate(rate)
        limits = httpx.Limits(max_connections=1024)
        async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as http:
            t0 = time.perf_counter()
            # Each arrival its own body (a client given fewer than it draws arrivals would
            # repeat them; sweep_bodies sizes the lists far past the Poisson tail).
            await asyncio.gather(
                *(one(http, a, bodies[i % len(bodies)]) for i, a in enumerate(arrivals))
            )
        return answers

    return asyncio.run(run())


REFERENCE_LOAD = 0.5  # the sweep phase whose p99 --sweep-deadline-x scales


def phase_deadline_ms(args: argparse.Namespace, done: list[dict]) -> int | None:
    """The deadline (/v1/recommend's timeout_ms) the next sweep phase's clients send, given the
    phases `done` before it: --sweep-deadline-ms, or with --sweep-deadline-x that many times the
    p99 of the REFERENCE_LOAD phase for every phase after it (an SLO stated against the latency
    at light load; none before it)."""
    if args.sweep_deadline_x is None:
        return args.sweep_deadline_ms
    reference = [row for row in done if row["load"] == REFERENCE_LOAD]
    if not reference:
        return None
    return max(1, round(args.sweep_deadline_x * reference[0]["p99_ms"]))


def p99_vs_reference(row: dict, rows: list[dict]) -> str:
    """A sweep phase's p99 over the REFERENCE_LOAD phase's (issue 23's 2x row), or "-"."""
    reference = [r["p99_ms"] for r in rows if r["load"] == REFERENCE_LOAD]
    return f"{row['p99_ms'] / reference[0]:.2f}" if reference and reference[0] > 0 else "-"


def sweep_bodies(
    args: argparse.Namespace, work: Workload, expected: float, deadline_ms: int | None
) -> list[dict]:
    """A sweep client's request bodies, one per arrival it may draw (`expected` on average):
    new histories (none cached by an earlier phase or request), widths drawn by the mix, each
    with the phase's deadline (if any)."""
    widths = sorted(args.widths)[: len(SWEEP_MIX)]
    shares = SWEEP_MIX[: len(widths)]
    deadline = {} if deadline_ms is None else {"timeout_ms": deadline_ms}
    count = math.ceil(expected + 5 * math.sqrt(expected) + 10)
    drawn = work.rng.choices(widths, weights=shares, k=count)
    return [
        recommend_body(history, width) | deadline
        for history, width in zip(work.fresh_histories(count), drawn, strict=True)
    ]


def sweep(args: argparse.Namespace, work: Workload, url: str, capacity_rps: float) -> list[dict]:
    rows = []
    with multiprocessing.get_context("spawn").Pool(args.clients) as pool:
        for load in args.loads:
            offered = load * capacity_rps
            rate = offered / args.clients
            deadline_ms = phase_deadline_ms(args, rows)
            jobs = [
                (url, sweep_bodies(args, work, rate * args.sweep_seconds, deadline_ms), rate,
                 args.sweep_seconds, seed)
                for seed in range(args.clients)
            ]  # fmt: skip
            t0 = time.perf_counter()
            results = pool.starmap(_sweep_client, jobs)
            wall = time.perf_counter() - t0
            latencies = [ms for r in results for ms in r.latencies_ms]
            statuses: dict[str, int] = {}
            for r in results:
                for key, n in r.statuses.items():
                    statuses[key] = statuses.get(key, 0) + n
            stats = RunStats(latencies or [0.0], wall).summary()
            row = {
                "load": load, "offered_rps": offered,
                "goodput_rps": len(latencies) / args.sweep_seconds,
                "goodput_of_capacity": len(latencies) / args.sweep_seconds / capacity_rps,
                "p50_ms": stats["p50_ms"], "p99_ms": stats["p99_ms"],
                "deadline_ms": deadline_ms,
                "statuses": dict(sorted(statuses.items())),
                "latency_parts": latency_parts(results),
            }  # fmt: skip
            rows.append(row)
            print(row, flush=True)
    return rows


def latency_parts(results: list[SweepAnswers]) -> dict[str, dict[str, float]]:
    """p50 / p99 of each part of the answered requests' latency: the decoder calls, the rest
    of the gateway's app, and what lies outside the app (the client's queue, the connection,
    the gateway's event loop before the app saw the request)."""
    parts: dict[str, list[float]] = {"decoder": [], "gateway": [], "outside": []}
    for r in results:
        for total, app, decoder in zip(r.latencies_ms, r.app_ms, r.decoder_ms, strict=True):
            if math.isnan(app) or math.isnan(decoder):  # no header: nothing to split
                continue
            parts["decoder"].append(decoder)
            parts["gateway"].append(app - decoder)
            parts["outside"].append(total - app)
    summaries = {name: RunStats(values, 1.0).summary() for name, values in parts.items() if values}
    return {name: {"p50_ms": s["p50_ms"], "p99_ms": s["p99_ms"]} for name, s in summaries.items()}


def mixed_capacity(phases: list[Phase], widths: list[int]) -> float:
    """REST throughput of the sweep's mix, from each width's closed-loop throughput (the mean
    of its rounds)."""
    by_width: dict[int, list[float]] = {}
    for p in phases:
        if p.path == "REST /v1/recommend":
            by_width.setdefault(p.width, []).append(len(p.latencies_ms) / max(p.wall_s, 1e-9))
    rest = {width: statistics.fmean(rates) for width, rates in by_width.items()}
    shares = list(zip(sorted(widths), SWEEP_MIX, strict=False))
    total = sum(share for _, share in shares)
    seconds = sum(share / total / max(float(rest[w]), 1e-9) for w, share in shares)  # type: ignore[arg-type]
    return 1.0 / seconds


def start_profiler(output: Path, pid: int) -> subprocess.Popen:
    """py-spy on a server and its children (API processes, gateway workers), sampling only the
    thread that holds each process' GIL: what keeps a process' interpreter busy while serving.
    bench/spy_summary.py reads the output."""
    output.parent.mkdir(parents=True, exist_ok=True)
    command = ["py-spy", "record", "--pid", str(pid), "--subprocesses", "--threads", "--gil",
               "--nonblocking", "--format", "raw", "--rate", "200",
               "--output", str(output)]  # fmt: skip
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)


def stop_profiler(profiler: subprocess.Popen) -> None:
    profiler.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
    try:
        profiler.wait(timeout=60)
    except subprocess.TimeoutExpired:
        profiler.kill()


def step_counts(metrics_url: str) -> StepCounts:
    """The decoder's forward counters (`widebeam_decoder_forwards_total` and its kin)."""
    text = httpx.get(metrics_url, timeout=10).text

    def sample(name: str) -> float:
        match = re.search(rf"^{re.escape(name)} ([0-9.e+-]+)$", text, re.M)
        return float(match.group(1)) if match else 0.0

    def count(name: str) -> int:
        return int(sample(name))

    return StepCounts(
        prefill_forwards=count('widebeam_decoder_forwards_total{kind="prefill"}'),
        prefilled_requests=count("widebeam_decoder_prefilled_requests_total"),
        prefill_tokens=count('widebeam_decoder_forward_rows_total{kind="prefill"}'),
        decode_forwards=count('widebeam_decoder_forwards_total{kind="decode"}'),
        decode_rows=count('widebeam_decoder_forward_rows_total{kind="decode"}'),
        beam_expansions=count("widebeam_decoder_beam_expansions_total"),
        step_seconds=sample("widebeam_decoder_step_seconds_total"),
        group_waits=count("widebeam_decoder_group_waits_total"),
        group_wait_seconds=sample("widebeam_decoder_group_wait_seconds_total"),
        inbox_requests=count("widebeam_decoder_inbox_requests_total"),
        inbox_seconds=sample("widebeam_decoder_inbox_seconds_total"),
        eager_prefills=count("widebeam_decoder_eager_prefills_total"),
        split_prefills=count("widebeam_decoder_split_prefills_total"),
    )


def serving_captures(metrics_url: str) -> dict[str, int]:
    """The decoder's graph captures after ready, by graph kind (decode, prefill, expansion)."""
    text = httpx.get(metrics_url, timeout=10).text
    return {kind: int(float(v)) for kind, v in SERVING_CAPTURES.findall(text)}


# ----- main -----------------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="fewer requests, a shorter sweep")
    parser.add_argument("--smoke", action="store_true", help="CPU tiny model, tiny widths")
    parser.add_argument("--widths", type=lambda s: [int(w) for w in s.split(",")])
    parser.add_argument("--concurrency", type=int, default=12)
    parser.add_argument(
        "--requests", type=int, default=96, help="the fewest timed requests per width and path"
    )
    parser.add_argument(
        "--phase-seconds",
        type=float,
        default=10.0,
        help="timed requests per width and path: what the engine answers in "
        "this long (at least --requests)",
    )
    parser.add_argument("--clients", type=int, default=4, help="sweep client processes")
    parser.add_argument("--client-processes", type=int,
                        help="processes the closed-loop clients are spread over (default: one "
                        "per client, as callers on machines of their own)")  # fmt: skip
    parser.add_argument("--loads", type=lambda s: [float(x) for x in s.split(",")],
                        default=[0.25, 0.5, 1.0, 1.5, 2.0, 2.5])  # fmt: skip
    parser.add_argument("--sweep-seconds", type=float, default=20.0)
    parser.add_argument("--sweep-timeout", type=float, default=1.0,
                        help="the gateway's request timeout in the sweep: the deadline the "
                        "decoder's admission by predicted wait sheds against")  # fmt: skip
    parser.add_argument("--sweep-deadline-ms", type=int,
                        help="the sweep's clients' own deadline (/v1/recommend's timeout_ms, "
                        "a latency budget below the gateway's timeout): the decoder refuses at "
                        "once what it predicts would finish later")  # fmt: skip
    parser.add_argument("--sweep-deadline-x", type=float,
                        help="instead of --sweep-deadline-ms: the phases after the 0.5x one "
                        "send this many times its p99 as their deadline (an SLO stated against "
                        "the light-load latency, as issue 23's 2x row reads)")  # fmt: skip
    parser.add_argument(
        "--api-processes",
        type=int,
        default=0,
        help="the decoder's --api-processes (0: gRPC in the engine's process)",
    )
    parser.add_argument("--rounds", type=int, default=1,
                        help="rounds of the servers' closed-loop phases, each followed by an "
                        "engine pass; ratios per round, and their median")  # fmt: skip
    parser.add_argument(
        "--admission-ratio",
        type=float,
        default=0.0,
        help="batched admission, the engine's and the decoder's (EngineConfig)",
    )
    parser.add_argument("--admission-max-wait-steps", type=int, default=2)
    parser.add_argument(
        "--gateway-workers",
        type=int,
        default=1,
        help="the gateways' --workers (processes on one port)",
    )
    parser.add_argument(
        "--max-queue-wait-s",
        type=float,
        help="the decoder's bound on a request's predicted queue wait (an "
        "operator's latency budget below the clients' deadline)",
    )
    parser.add_argument(
        "--answers-at-step-start", action="store_true", help="the decoder's --answers-at-step-start"
    )
    parser.add_argument(
        "--group-wait-ms", type=float, default=0.0, help="the decoder's --group-wait-ms"
    )
    parser.add_argument("--max-prefill-graph-tokens", type=int,
                        help="the engine's and the decoder's largest prefill batch replayed "
                        "from a CUDA graph (default: EngineConfig's)")  # fmt: skip
    parser.add_argument("--prefill-graph-split", action="store_true",
                        help="the engine's and the decoder's prefill_graph_split: batches past "
                        "the graph limit as graph-sized batches")  # fmt: skip
    parser.add_argument("--admit-before-flags", action=argparse.BooleanOptionalAction,
                        help="the engine's and the decoder's admit_before_flags: a queue "
                        "that fits whole is prefilled before the previous step's flags are "
                        "read (default: EngineConfig's)")  # fmt: skip
    parser.add_argument("--intake-after-flags", action=argparse.BooleanOptionalAction,
                        help="the engine's and the decoder's intake_after_flags: arrivals "
                        "while a step reads its flags are admitted in that step, after a queue "
                        "admitted before them (default: EngineConfig's)")  # fmt: skip
    parser.add_argument("--answers-after-launch", action=argparse.BooleanOptionalAction,
                        help="the engine's and the decoder's answers_after_launch: answers "
                        "built after the step's forwards are queued (default: "
                        "EngineConfig's)")  # fmt: skip
    parser.add_argument("--profile", type=Path,
                        help="py-spy the decoder and gateway over the closed-loop phases into "
                        "this folder (needs py-spy; read with spy_summary.py)")  # fmt: skip
    parser.add_argument("--timeline", type=Path,
                        help="record a device timeline (torch profiler) of every closed-loop "
                        "phase, the decoder's into this folder: busy share, idle time by "
                        "engine phase")  # fmt: skip
    parser.add_argument("--max-rows", type=int, default=16384)
    parser.add_argument("--max-kv-slots", type=int, default=120_000)
    parser.add_argument("--model", type=Path, help="default: workload 3's Qwen3-1.7B + SID model")
    parser.add_argument("--catalog", type=Path, help="default: workload 3's 430k-SID catalog")
    add_cache_argument(parser)
    args = parser.parse_args()
    if args.quick:  # shorter defaults; what the command line names still wins
        parser.set_defaults(requests=36, phase_seconds=3.0, loads=[0.5, 2.0], sweep_seconds=8.0)
        args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    if args.sweep_deadline_x is not None:
        if args.sweep_deadline_ms is not None:
            parser.error("give --sweep-deadline-ms or --sweep-deadline-x, not both")
        if args.sweep_deadline_x <= 0:
            parser.error("--sweep-deadline-x must be > 0")
    if args.client_processes is not None and not 1 <= args.client_processes <= args.concurrency:
        parser.error(f"--client-processes must be in 1..--concurrency ({args.concurrency})")
    decoder_env = None
    if args.smoke:
        args.widths = args.widths or [4]
        args.concurrency, args.requests, args.clients = 2, 4, 1
        args.phase_seconds = 0.0
        args.loads = [REFERENCE_LOAD, 2.0] if args.sweep_deadline_x else [2.0]
        args.sweep_seconds, args.sweep_timeout = 1.0, 5.0
        args.max_rows, args.max_kv_slots = 64, 16384
        # One torch thread per process: on a shared CPU, spinning thread pools of the bench
        # and the decoder slow both down far more than one thread does.
        torch.set_num_threads(1)
        decoder_env = {"OMP_NUM_THREADS": "1"}
    if args.sweep_deadline_x is not None and REFERENCE_LOAD not in args.loads:
        parser.error(
            f"--sweep-deadline-x scales the {REFERENCE_LOAD}x phase's p99: --loads needs it"
        )
    args.widths = args.widths or [50, 512, 1000]
    work = build_workload(args)
    sampler = GpuSampler().start()
    try:
        # The engine stays (idle) beside the decoder: measured again after each round.
        engine = start_engine(args, work)
        phases = engine_phases(args, work, sampler, engine, 0)
    except BaseException:
        sampler.stop()
        raise
    metrics_port = free_port()
    decoder = DecoderProcess(
        work.model, args.max_rows, args.max_kv_slots, "--catalog", str(work.catalog),
        "--metrics-port", str(metrics_port), "--capture-at-start",
        "--capture-beam-widths", ",".join(map(str, args.widths)),
        "--api-processes", str(args.api_processes),
        "--admission-ratio", str(args.admission_ratio),
        "--admission-max-wait-steps", str(args.admission_max_wait_steps),
        *(("--no-" if value is False else "--") + name.replace("_", "-")
          + ("" if isinstance(value, bool) else f"={value}")
          for name, value in graph_limit(args).items()),
        "--group-wait-ms", str(args.group_wait_ms),
        *(["--answers-at-step-start"] if args.answers_at_step_start else []),
        *(["--max-queue-wait-s", str(args.max_queue_wait_s)] if args.max_queue_wait_s else []),
        *(["--profile-dir", str(args.timeline / "decoder")] if args.timeline else []),
        env=decoder_env,
    )  # fmt: skip
    gateway = sweep_gateway = None
    try:
        decoder.wait_ready()
        gateway = GatewayProcess(
            [decoder.address], max(args.widths), args.gateway_workers, request_timeout_s=600.0
        )
        gateway.wait_ready()
        metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
        # The decoder's own CPU apart from its children's: its API processes with
        # --api-processes (a catalog load's child otherwise, none here).
        pids = {
            "decoder": (decoder.proc.pid, True, False),
            "decoder API": (decoder.proc.pid, False, True),
            "gateway": (gateway.proc.pid, True, True),
        }
        profilers = [] if args.profile is None else [
            start_profiler(args.profile / f"{name}.spy", pid)
            for name, pid in (("decoder", decoder.proc.pid), ("gateway", gateway.proc.pid))
        ]  # fmt: skip
        timelines = None
        if args.timeline:
            timelines = DecoderTimelines(decoder.proc.pid, args.timeline / "decoder")
        model_name = httpx.get(f"{gateway.url}/v1/models", timeout=60).json()["data"][0]["id"]
        clients = ClientProcesses(
            args.client_processes or args.concurrency, args.concurrency, decoder.address,
            gateway.url,
        )  # fmt: skip
        try:
            for rnd in range(args.rounds):
                phases += service_phases(
                    args, work, clients, model_name, metrics_url, pids, sampler, timelines, rnd
                )
                phases += engine_phases(args, work, sampler, engine, rnd + 1)
        finally:
            clients.close()
        for profiler in profilers:
            stop_profiler(profiler)
        gateway.stop()
        gateway = None
        engine_captures = engine.runner.capture_counts.total(CapturePhase.SERVING)
        capacity = mixed_capacity(phases, args.widths)
        sweep_gateway = GatewayProcess(
            [decoder.address], max(args.widths), args.gateway_workers,
            request_timeout_s=args.sweep_timeout,
        )  # fmt: skip
        sweep_gateway.wait_ready()
        before_sweep = sum(serving_captures(metrics_url).values())
        sweep_rows = sweep(args, work, sweep_gateway.url, capacity)
        captures = serving_captures(metrics_url)
        for row in sweep_rows:  # the sweep's captures, not split by load
            row["captures_in_sweep"] = sum(captures.values()) - before_sweep
    finally:
        sampler.stop()
        for process in (gateway, sweep_gateway, decoder):
            if process is not None:
                process.stop()
    report(args, phases, sweep_rows, capacity, captures, engine_captures)


def engine_passes(rows: list[dict]) -> dict[int, list[dict]]:
    """width -> the engine's rows in pass order."""
    passes: dict[int, list[dict]] = {}
    for r in sorted((r for r in rows if r["path"] == ENGINE), key=lambda r: r["round"]):
        passes.setdefault(r["width"], []).append(r)
    return passes


def engine_baseline(rows: list[dict]) -> dict[tuple[int, int], tuple[float, float]]:
    """(width, round) -> what that round of the services is compared with: the mean req/s and
    p99 of the engine's passes on both sides of it (round r: passes r and r + 1)."""
    baseline = {}
    for width, runs in engine_passes(rows).items():
        for rnd in range(len(runs) - 1):
            pair = runs[rnd : rnd + 2]
            baseline[width, rnd] = (statistics.fmean(float(r["answered_rps"]) for r in pair),
                                    statistics.fmean(float(r["p99_ms"]) for r in pair))  # fmt: skip
    return baseline


def engine_drift(rows: list[dict]) -> dict[int, float]:
    """width -> the engine's last pass ÷ its first, in req/s (1.0: the run held still)."""
    return {
        width: float(runs[-1]["answered_rps"]) / max(float(runs[0]["answered_rps"]), 1e-9)
        for width, runs in engine_passes(rows).items()
    }


def compare_with_engine(rows: list[dict]) -> None:
    """Each row's `vs_engine` and `p99_vs_engine`: a service row against the engine's passes
    around its round, an engine pass against the mean of all of them."""
    baseline = engine_baseline(rows)
    passes = engine_passes(rows)
    for r in rows:
        if r["path"] == ENGINE:
            runs = passes[r["width"]]
            rps = statistics.fmean(float(x["answered_rps"]) for x in runs)
            p99 = statistics.fmean(float(x["p99_ms"]) for x in runs)
        else:
            rps, p99 = baseline[r["width"], r["round"]]
        r["vs_engine"] = float(r["answered_rps"]) / max(rps, 1e-9)
        r["p99_vs_engine"] = float(r["p99_ms"]) / max(p99, 1e-9)


def median_over_rounds(rows: list[dict]) -> list[dict]:
    """Per service path and width: the median over rounds of its ratios to the engine."""
    groups: dict[tuple[str, int], list[dict]] = {}
    for r in rows:
        if r["path"] != ENGINE:
            groups.setdefault((r["path"], r["width"]), []).append(r)
    return [
        {"path": path, "width": width, "rounds": len(runs),
         "vs_engine": statistics.median(r["vs_engine"] for r in runs),
         "p99_vs_engine": statistics.median(r["p99_vs_engine"] for r in runs)}
        for (path, width), runs in groups.items()
    ]  # fmt: skip


def report(
    args: argparse.Namespace,
    phases: list[Phase],
    sweep_rows: list[dict],
    capacity: float,
    captures: dict[str, int],
    engine_captures: int,
) -> None:
    rows = [p.row() for p in phases]
    compare_with_engine(rows)
    drift = engine_drift(rows)
    medians = median_over_rounds(rows)
    result = {
        "env": environment() | {"widths": args.widths, "concurrency": args.concurrency,
                                "api_processes": args.api_processes,
                                "gateway_workers": args.gateway_workers,
                                "client_processes": args.client_processes or args.concurrency,
                                "admission_ratio": args.admission_ratio,
                                "admission_max_wait_steps": args.admission_max_wait_steps,
                                "max_queue_wait_s": args.max_queue_wait_s,
                                "max_prefill_graph_tokens": args.max_prefill_graph_tokens,
                                "prefill_graph_split": args.prefill_graph_split,
                                "admit_before_flags": args.admit_before_flags,
                                "intake_after_flags": args.intake_after_flags,
                                "answers_after_launch": args.answers_after_launch,
                                "answers_at_step_start": args.answers_at_step_start,
                                "group_wait_ms": args.group_wait_ms,
                                "sweep_deadline_ms": args.sweep_deadline_ms,
                                "sweep_deadline_x": args.sweep_deadline_x},
        "closed_loop": rows, "sweep_capacity_rps": capacity, "sweep": sweep_rows,
        "decoder_captures_after_ready": sum(captures.values()),
        "decoder_captures_after_ready_by_kind": captures,
        "engine_captures_after_ready": engine_captures,
        "engine_drift": drift,
        "median_over_rounds": medians,
    }  # fmt: skip
    write_result("stack", result)
    print(markdown_table(
        ["path", "width", "round", "req/s", "÷ engine", "p50 ms", "p99 ms", "p99 ÷ engine",
         "statuses",
         "captures", *(f"{k} CPU ms/req" for k in CPU_COLUMNS), *BATCHING_COLUMNS.values()],
        [[r["path"], r["width"], r["round"], r["answered_rps"], f"{r['vs_engine']:.2f}",
          r["p50_ms"],
          r["p99_ms"], f"{r['p99_vs_engine']:.2f}", r["statuses"], r["captures"],
          *(f"{r['cpu_ms_per_request'][k]:.1f}" if k in r["cpu_ms_per_request"] else "-"
            for k in CPU_COLUMNS),
          *(f"{r['batching'][k]:.2f}" if k in r["batching"] else "-"
            for k in BATCHING_COLUMNS)] for r in rows],
    ))  # fmt: skip
    print(markdown_table(
        ["load", "offered req/s", "goodput req/s", "÷ capacity", "p50 ms", "p99 ms",
         f"p99 ÷ {REFERENCE_LOAD}x p99", "deadline ms", "statuses",
         *(f"{part} p50 / p99 ms" for part in LATENCY_PARTS)],
        [[r["load"], r["offered_rps"], r["goodput_rps"], f"{r['goodput_of_capacity']:.2f}",
          r["p50_ms"], r["p99_ms"], p99_vs_reference(r, sweep_rows), r["deadline_ms"] or "-",
          r["statuses"],
          *(f"{r['latency_parts'][part]['p50_ms']:.1f} / {r['latency_parts'][part]['p99_ms']:.1f}"
            if part in r["latency_parts"] else "-" for part in LATENCY_PARTS)]
         for r in sweep_rows],
    ))  # fmt: skip
    # Did the device and the host run alike in every phase?
    print(markdown_table(
        ["path", "width", "round", "req/s", "SM MHz", "power W", "max °C", "host probe ms",
         *(f"{key} busy cores" for key in HOST_CPU_KEYS)],
        [[r["path"], r["width"], r["round"], r["answered_rps"], *(r["gpu"].get(k, "-") for k in
          ("sm_mhz", "power_w", "max_temp_c")), f"{r['host_probe_ms']:.2f}",
          *(f"{r['host_cpu'][k]:.2f}" if k in r["host_cpu"] else "-" for k in HOST_CPU_KEYS)]
         for r in rows],
    ))  # fmt: skip
    if any(r["timeline"] for r in rows):
        print(markdown_table(
            ["path", "width", "round", "req/s", *TIMELINE_HEADERS],
            [[r["path"], r["width"], r["round"], r["answered_rps"],
              *timeline_cells(r["timeline"], len(p.latencies_ms))]
             for r, p in zip(rows, phases, strict=True)],
        ))  # fmt: skip
    if args.rounds > 1:
        print(markdown_table(
            ["path", "width", "rounds", "median ÷ engine", "median p99 ÷ engine"],
            [[m["path"], m["width"], m["rounds"], f"{m['vs_engine']:.2f}",
              f"{m['p99_vs_engine']:.2f}"] for m in medians],
        ))  # fmt: skip
    print(
        "engine drift (last pass ÷ first, req/s): "
        + ", ".join(f"n = {w}: {d:.2f}" for w, d in drift.items())
    )
    in_sweep = sweep_rows[0]["captures_in_sweep"] if sweep_rows else 0
    print(
        f"graph captures after ready: decoder {sum(captures.values())} {captures} "
        f"({in_sweep} in the sweep), in-process engine {engine_captures}"
    )


if __name__ == "__main__":
    main()
