"""Decoders of this tree (A) and of another tree or other settings (B, and C), served side
by side on one device and timed in alternation through gRPC and REST: a before/after of the
serving path that the host's speed cannot decide.

On the lent H200 a thread's speed flips by up to 2x from one second to the next (the
sixteenth session's host series), so two `stack.py` runs one after the other compare hosts as
much as trees. Here every decoder (each with its gateway and its own client processes) stays
up for the whole run, and each round times every side's phase in turn, the order rotated every
round; the report gives each round's B ÷ A (and C ÷ A) and their median, with each side's
batching counters. Several variants in one run share its start-up and its rounds' A phases.

    python ab_stack.py --other-tree /path/to/before [--widths 50] [--rounds 6] [--smoke]
    python ab_stack.py --b-args "--max-prefill-graph-tokens 4096"   # a setting, one tree
    python ab_stack.py --b-args=--flag-one --b-args="--flag-one --flag-two"   # B and C
    python ab_stack.py --b-args="--gateway --workers 2"   # a gateway setting

With `--other-tree`, the variants' decoders import that tree's `widebeam` (a folder of links
put first on their PYTHONPATH); each `--b-args` makes one variant, with decoder flags on top of
A's and, after a `--gateway` token, flags for its gateway. The gateways, the clients and the
workload are this tree's.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
from cache_dir import add_cache_argument
from closed_loop_clients import GRPC_RECOMMEND, ClientProcesses
from e2e import DecoderProcess, free_port
from gpu_clocks import GpuSampler
from harness import environment, markdown_table
from harness import write_json as write_result
from replicas import GatewayProcess
from stack import BATCHING_COLUMNS, Phase, Workload, build_workload, service_phases

BASELINE = "A"
GATEWAY = "--gateway"  # in a variant's flags: the decoder's before it, the gateway's after


def variant_flags(flags: str) -> tuple[list[str], list[str]]:
    """A variant's `--b-args`: its decoder flags and its gateway flags."""
    words = shlex.split(flags)
    if GATEWAY not in words:
        return words, []
    at = words.index(GATEWAY)
    return words[:at], words[at + 1 :]


def package_shim(tree: Path, folder: Path) -> Path:
    """A folder whose `widebeam` package is `tree`'s (its widebeam/ entries and its services/,
    linked), for PYTHONPATH; `folder` is returned."""
    package = folder / "widebeam"
    package.mkdir(parents=True)
    for entry in (tree / "widebeam").iterdir():
        (package / entry.name).symlink_to(entry.resolve())
    (package / "services").symlink_to((tree / "services").resolve())
    return folder


def imported_from(env: dict[str, str]) -> str:
    """Where `widebeam` resolves for a process started with `env` (B's check)."""
    code = "import widebeam.services as s, os; print(os.path.realpath(os.path.dirname(s.__file__)))"
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    if done.returncode != 0:
        raise SystemExit(f"the other tree does not import: {done.stderr[-2000:]}")
    return done.stdout.strip()


class Side:
    """One decoder with its gateway and client processes."""

    def __init__(
        self,
        name: str,
        args: argparse.Namespace,
        work: Workload,
        env: dict[str, str] | None,
        extra: list[str],  # decoder flags of this side's own
        gateway_extra: list[str],  # gateway flags of its own
    ) -> None:
        self.name = name
        self.gateway_extra = gateway_extra
        port = str(free_port())
        self.metrics_url = f"http://127.0.0.1:{port}/metrics"
        self.decoder = DecoderProcess(
            work.model, args.max_rows, args.max_kv_slots, "--catalog", str(work.catalog),
            "--metrics-port", port, "--capture-at-start",
            "--capture-beam-widths", ",".join(map(str, args.widths)), *extra, env=env,
        )  # fmt: skip
        self.gateway: GatewayProcess | None = None
        self.clients: ClientProcesses | None = None

    def start(self, args: argparse.Namespace) -> None:
        self.decoder.wait_ready()
        self.gateway = GatewayProcess(
            [self.decoder.address], max(args.widths), 1, 600.0, *self.gateway_extra
        )
        self.gateway.wait_ready()
        self.clients = ClientProcesses(
            args.concurrency, args.concurrency, self.decoder.address, self.gateway.url
        )
        models = httpx.get(f"{self.gateway.url}/v1/models", timeout=60).json()
        self.model_name: str = models["data"][0]["id"]
        self.servers = {
            "decoder": (self.decoder.proc.pid, True, False),
            "decoder API": (self.decoder.proc.pid, False, True),
            "gateway": (self.gateway.proc.pid, True, True),
        }

    def stop(self) -> None:
        if self.clients is not None:
            self.clients.close()
        for process in (self.gateway, self.decoder):
            if process is not None:
                process.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--other-tree",
        type=Path,
        help="the tree B's decoder runs (a checkout or `git archive` of it); default: this one",
    )
    parser.add_argument(
        "--b-args",
        action="append",
        default=[],
        help="decoder flags a variant gets on top of A's, and after a --gateway token its "
        "gateway's; once per variant (B, C; write --b-args=--flag for a lone flag)",
    )
    parser.add_argument("--widths", type=lambda s: [int(w) for w in s.split(",")])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--concurrency", type=int, default=12)
    parser.add_argument(
        "--requests", type=int, default=96, help="the fewest timed requests per phase"
    )
    parser.add_argument(
        "--phase-seconds",
        type=float,
        default=3.0,
        help="timed requests per phase: what A's warm-up rate answers in this long",
    )
    parser.add_argument("--max-rows", type=int, default=16384)
    parser.add_argument("--max-kv-slots", type=int, default=120_000)
    parser.add_argument("--model", type=Path, help="default: workload 3's Qwen3-1.7B + SID model")
    parser.add_argument("--catalog", type=Path, help="default: workload 3's 430k-SID catalog")
    add_cache_argument(parser)
    parser.add_argument("--smoke", action="store_true", help="CPU: a tiny model, 2 rounds")
    args = parser.parse_args()  # fmt: skip
    tree = args.other_tree
    if tree is not None and not ((tree / "widebeam").is_dir() and (tree / "services").is_dir()):
        parser.error(f"--other-tree {tree} holds no widebeam/ and services/")
    variant_args = [variant_flags(flags) for flags in args.b_args] or [([], [])]
    if tree is None and not all(decoder or gateway for decoder, gateway in variant_args):
        parser.error("each variant must differ from A: give --other-tree, --b-args or both")
    if len(variant_args) > 2:
        # each side is a decoder with its KV cache on the one device (about 20 GB at W3's
        # default slots): three fit an H100's 80 GB
        parser.error("at most 2 variants (B, C): each is a decoder on the device")
    if args.rounds < 1 or args.concurrency < 1 or args.requests < 1:
        parser.error("--rounds, --concurrency and --requests must be >= 1")
    decoder_env: dict[str, str] = {}
    if args.smoke:
        args.widths = args.widths or [4]
        args.concurrency, args.requests, args.rounds, args.phase_seconds = 2, 4, 2, 0.0
        args.max_rows, args.max_kv_slots = 64, 16384
        decoder_env = {"OMP_NUM_THREADS": "1"}
    args.widths = args.widths or [50]
    work = build_workload(args)
    with tempfile.TemporaryDirectory(prefix="ab-shim-") as shim_dir:
        env_b = dict(decoder_env)
        if tree is not None:
            shim = package_shim(tree, Path(shim_dir))
            path = os.pathsep.join(p for p in (str(shim), os.environ.get("PYTHONPATH", "")) if p)
            env_b["PYTHONPATH"] = path
        b_source = imported_from({**os.environ, **env_b})
        names = [chr(ord(BASELINE) + 1 + i) for i in range(len(variant_args))]
        sides = {BASELINE: Side(BASELINE, args, work, decoder_env or None, [], [])}
        for name, (flags, gateway_flags) in zip(names, variant_args, strict=True):
            sides[name] = Side(name, args, work, env_b or None, flags, gateway_flags)
        sampler = GpuSampler().start()
        try:
            for side in sides.values():
                side.start(args)
            rows = run_rounds(args, work, sides, sampler)
        finally:
            sampler.stop()
            for side in sides.values():
                side.stop()
    gateways = {name: sides[name].gateway_extra for name in names}
    report(args, dict(zip(names, args.b_args or [""], strict=True)), gateways, rows, b_source)


def phase_requests(
    concurrency: int, latencies_ms: list[float], phase_seconds: float, fewest: int
) -> int:
    """Requests that a closed loop of `concurrency` clients answers in `phase_seconds`, at
    the rate their latencies give (each client has one request out: concurrency / mean
    latency), never fewer than `fewest`. A short warm wave's wall time is no measure: two
    requests a client last ~0.1 s at n = 50, so the client processes' start skew (their
    common start's margin, a late dispatch) doubled or tripled it, and every phase fell to
    the floor (half a second long)."""
    if not latencies_ms:
        return fewest
    rate = concurrency * 1000.0 / (sum(latencies_ms) / len(latencies_ms))
    return max(fewest, round(rate * phase_seconds))


def run_rounds(
    args: argparse.Namespace, work: Workload, sides: dict[str, Side], sampler: GpuSampler
) -> list[dict]:
    # A's warm rate sizes every phase (the same requests count for every side); its first wave
    # meets cold caches and the clients' first connections, so the second one is read.
    first = sides[BASELINE]
    assert first.clients is not None
    for width in args.widths:
        first.clients.run(GRPC_RECOMMEND, "", work.fresh_histories(2 * args.concurrency), width)
        histories = work.fresh_histories(2 * args.concurrency)
        warm, _ = first.clients.run(GRPC_RECOMMEND, "", histories, width)
        work.counts[width] = phase_requests(
            args.concurrency, warm.latencies_ms, args.phase_seconds, args.requests
        )
    rows: list[dict] = []
    names = list(sides)
    for rnd in range(args.rounds):
        shift = rnd % len(names)  # each side in each position as often as the rounds allow
        for name in names[shift:] + names[:shift]:
            side = sides[name]
            assert side.clients is not None
            phases: list[Phase] = service_phases(
                args, work, side.clients, side.model_name, side.metrics_url, side.servers,
                sampler, None, rnd, with_chat=False,
            )  # fmt: skip
            for phase in phases:
                rows.append(phase.row() | {"side": name})
                print(rows[-1], flush=True)
    return rows


def paired_ratios(rows: list[dict]) -> dict[tuple[str, str, int], list[float]]:
    """(variant, path, width) -> the variant's req/s ÷ A's, each round."""
    rate = {(r["side"], r["path"], r["width"], r["round"]): r["answered_rps"] for r in rows}
    out: dict[tuple[str, str, int], list[float]] = {}
    for (side, path, width, rnd), rps in sorted(rate.items()):
        a = rate.get((BASELINE, path, width, rnd))
        if side != BASELINE and a:
            out.setdefault((side, path, width), []).append(rps / a)
    return out


def report(
    args: argparse.Namespace,
    variants: dict[str, str],  # each variant's --b-args
    gateways: dict[str, list[str]],  # the gateway flags each took from them
    rows: list[dict],
    b_source: str,
) -> None:
    ratios = paired_ratios(rows)
    summary = []
    for (variant, path, width), values in ratios.items():
        entry = {"variant": variant, "path": path, "width": width, "over_a": values,
                 "median_over_a": statistics.median(values)}  # fmt: skip
        for role, side in (("a", BASELINE), ("variant", variant)):
            mine = [r for r in rows if (r["side"], r["path"], r["width"]) == (side, path, width)]
            entry[f"median_rps_{role}"] = statistics.median(r["answered_rps"] for r in mine)
            for key in BATCHING_COLUMNS:
                entry[f"median_{key}_{role}"] = statistics.median(r["batching"][key] for r in mine)
        summary.append(entry)
    result = {
        "env": environment() | {"widths": args.widths, "concurrency": args.concurrency,
                                "rounds": args.rounds, "other_tree": str(args.other_tree or ""),
                                "variants": variants, "variant_gateway_flags": gateways,
                                "variants_import_from": b_source},
        "phases": rows, "summary": summary,
    }  # fmt: skip
    write_result("ab_stack", result)
    print(markdown_table(
        ["side", "path", "width", "round", "req/s", "p50 ms", "p99 ms", "statuses",
         *BATCHING_COLUMNS.values(), "host probe ms"],
        [[r["side"], r["path"], r["width"], r["round"], r["answered_rps"], r["p50_ms"],
          r["p99_ms"], r["statuses"], *(f"{r['batching'][k]:.2f}" for k in BATCHING_COLUMNS),
          f"{r['host_probe_ms']:.2f}"] for r in rows],
    ))  # fmt: skip
    for name, flags in variants.items():
        print(f"{name}: A's flags and {flags.strip() or 'none'}")
    print(markdown_table(
        ["variant", "path", "width", "÷ A per round", "median ÷ A", "median req/s A / it",
         "rows/decode A / it", "decodes/req A / it"],
        [[e["variant"], e["path"], e["width"], " ".join(f"{v:.2f}" for v in e["over_a"]),
          f"{e['median_over_a']:.3f}",
          f"{e['median_rps_a']:.1f} / {e['median_rps_variant']:.1f}",
          f"{e['median_rows_per_decode_a']:.0f} / {e['median_rows_per_decode_variant']:.0f}",
          f"{e['median_decodes_per_request_a']:.2f} / "
          f"{e['median_decodes_per_request_variant']:.2f}"]
         for e in summary],
    ))  # fmt: skip
    print(f"the variants' decoders imported widebeam from {b_source}")


if __name__ == "__main__":
    main()
