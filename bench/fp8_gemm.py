"""Where an FP8 decode step's GEMM time goes (issue 20), every variant in one run.

    python bench/fp8_gemm.py [--rows 6144,1024,12288,512] [--budget-s 220]
        [--only gemm,layers,chain,kernels] [--smoke]
    python bench/fp8_gemm.py --only layers   # part 2 alone: the quantization kernels

At the W3 shape (Qwen3-1.7B: hidden 2048, MLP 6144, 16 q / 8 kv heads of 128), four parts,
each printed as a table with its legend as soon as it is measured and written to
`$OUT/fp8_gemm.json` (rewritten after each part, so a run cut short keeps what it measured):

1. gemm: each GEMM of a decoder layer (fused q/k/v 4096 x 2048, o 2048 x 2048, fused gate/up
   12288 x 2048, down 2048 x 6144; out x in) at each row count M, run every way we have: bf16,
   the activation quantization alone, `torch._scaled_mm` row-wise (serving) and per-tensor,
   each with and without fast accumulation, the Triton FP8 GEMM in each tile configuration
   (`widebeam/kernels/fp8/triton_gemm.py`), and today's unfused FP8 linear (quantization +
   row-wise).
   Each variant is checked against the torch reference on the GPU before it is timed.
2. layers: the kernels that feed the GEMMs (RMSNorm, add + RMSNorm, SiLU product) with a
   separate quantization pass against the fused kernels that write FP8 (bit-identity checked),
   the quantization pass alone, and the wide rows' kernels (MLP width) both ways: one pass
   over the whole row and two passes over chunks (`--only layers`: this part alone, ~20 s on
   the H200), each against the floor of its bytes.
3. chain: two decoder layers of the W3 shape (attention replaced by the identity) as one CUDA
   graph: bf16, FP8 unfused, FP8 fused, and FP8 fused with the fastest GEMM per layer.
4. kernels: the device kernels each GEMM variant launches (torch profiler), to tell which
   library and tile each path runs (cuBLASLt's `sm90_xmma_gemm_*` vs CUTLASS vs Triton).

Timing: every call is captured in a CUDA graph (as the engine runs a decode step, so host launch
cost is not timed) together with enough calls on rotating copies of its inputs (weights included:
a decode step reads each layer's weights from HBM) to exceed the 50 MB L2 several times; the
graph is replayed between CUDA events after warm-up, and the median per-call time of the
replays is reported. Inputs are random normal, never zeros. `--budget-s` bounds the run: each
part stops at its share of it and says what it skipped.

`--smoke`: tiny shapes on the CPU (Triton's interpreter, host timers) to check the script
(tests/bench/test_fp8_gemm_smoke.py).
"""

from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F
from smoke_interpreter import use_interpreter_for_smoke

SMOKE = use_interpreter_for_smoke()  # before any kernel module is imported

from harness import environment, markdown_table, write_json  # noqa: E402

from widebeam.kernels.fp8.backend import SCALED_MM, SCALED_MM_FAST, Fp8Gemm  # noqa: E402
from widebeam.kernels.fp8.quantize import (  # noqa: E402
    FP8_DTYPE,
    FP8_MAX,
    Fp8Rows,
    Fp8Weight,
    quantize_weight,
)
from widebeam.kernels.fp8.scaled_mm import (  # noqa: E402
    fp8_linear_scaled_mm,
    quantize_activations,
    scaled_mm_rows,
)
from widebeam.kernels.fp8.torch_ref import fp8_matmul_ref  # noqa: E402
from widebeam.kernels.layers.dispatch import (  # noqa: E402
    add_rms_norm,
    add_rms_norm_fp8,
    rms_norm,
    rms_norm_fp8,
    silu_mul,
    silu_mul_fp8,
)
from widebeam.services.decoder.config import DType  # noqa: E402
from widebeam.services.decoder.model.fp8_linear import Fp8Linear, set_fused_inputs  # noqa: E402
from widebeam.services.decoder.model.transformer import CausalLM  # noqa: E402
from widebeam.services.decoder.testing.tiny_model import write_tiny_model  # noqa: E402

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
CUDA = DEVICE.type == "cuda"
BF16 = torch.bfloat16
LAYERS = 28  # Qwen3-1.7B: per-layer times x 28 give a decode step's share
EPS = 1e-6
# Rotating inputs per timed graph: at least this many bytes (bf16 operands; FP8 ones are half),
# so every call reads its operands from HBM as a decode step does (H200 L2: 50 MB).
ROTATE_BYTES = 200 << 20


@dataclass(frozen=True)
class Shape:
    """The W3 model's sizes (or the smoke run's)."""

    hidden: int
    inter: int
    heads: int
    kv_heads: int
    head_dim: int

    def gemms(self) -> dict[str, tuple[int, int]]:  # name -> (out, in)
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        return {
            "qkv": (q + 2 * kv, self.hidden),
            "o": (self.hidden, q),
            "gate_up": (2 * self.inter, self.hidden),
            "down": (self.hidden, self.inter),
        }


W3 = Shape(hidden=2048, inter=6144, heads=16, kv_heads=8, head_dim=128)
TINY = Shape(hidden=64, inter=96, heads=4, kv_heads=2, head_dim=16)


# ----------------------------------------------------------------------------- timing


class Timer:
    def __init__(self, samples: int, target_ms: float, max_calls: int) -> None:
        self.samples, self.target_ms, self.max_calls = samples, target_ms, max_calls

    def us(self, calls: list[Callable[[], object]]) -> tuple[float, int]:
        """Median microseconds per call, and the calls per replay. `calls`: the same call on
        each rotating copy of its inputs."""
        if not CUDA:  # smoke run: host timers, no warm-up: under the interpreter a call takes
            # seconds and its time means nothing (the run checks that every part runs)
            times = []
            for i in range(self.samples):
                t0 = time.perf_counter()
                calls[i % len(calls)]()
                times.append((time.perf_counter() - t0) * 1e6)
            return statistics.median(times), 1
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up: compilation, cuBLAS heuristics, workspaces
            for call in calls:
                call()
        torch.cuda.current_stream().wait_stream(side)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for call in calls:
            call()
        end.record()
        torch.cuda.synchronize()
        each_ms = max(start.elapsed_time(end) / len(calls), 1e-3)
        inner = max(len(calls), min(self.max_calls, math.ceil(self.target_ms / each_ms)))
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for i in range(inner):
                calls[i % len(calls)]()
        graph.replay()
        events = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            for _ in range(self.samples)
        ]
        for first, last in events:
            first.record()
            graph.replay()
            last.record()
        torch.cuda.synchronize()
        del graph
        return statistics.median(a.elapsed_time(b) for a, b in events) * 1000 / inner, inner


def copies_for(bytes_per_call: int, cap: int) -> int:
    return max(2, min(cap, math.ceil(ROTATE_BYTES / max(bytes_per_call, 1))))


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """||got - want||_F / ||want||_F in fp32."""
    want = want.float()
    return float((got.float() - want).norm() / want.norm())


def fmt(value: float | None, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


class Budget:
    """Deadlines: each part may run until its share of `--budget-s` since the start."""

    def __init__(self, seconds: float) -> None:
        self.start, self.seconds = time.monotonic(), seconds
        self.skipped: list[str] = []

    def left(self, share: float) -> bool:
        return time.monotonic() - self.start < share * self.seconds

    def skip(self, what: str) -> None:
        self.skipped.append(what)
        print(f"  (budget) skipped: {what}", flush=True)

    def elapsed(self) -> float:
        return time.monotonic() - self.start


# ----------------------------------------------------------------------------- part 1: GEMMs


def quantize_tensor(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-tensor e4m3: one scale (amax / 448) for the whole matrix, fp32 scalar."""
    tf = t.float()
    scale = tf.abs().amax().clamp(min=1e-12) / FP8_MAX
    return (tf / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE), scale


@dataclass
class GemmInputs:
    x: list[torch.Tensor]  # [M, K] bf16 each
    w: list[torch.Tensor]  # [N, K] bf16 each
    rows: list[Fp8Rows]  # x quantized per row
    fw: list[Fp8Weight]  # w quantized per output channel
    xt: list[tuple[torch.Tensor, torch.Tensor]]  # x per tensor: ([M, K] e4m3, [] fp32)
    wt: list[tuple[torch.Tensor, torch.Tensor]]  # w per tensor


def gemm_inputs(m: int, n: int, k: int, copies: int, seed: int) -> GemmInputs:
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    xs = [torch.randn(m, k, device=DEVICE, generator=gen).to(BF16) for _ in range(copies)]
    ws = [
        (torch.randn(n, k, device=DEVICE, generator=gen) / k**0.5).to(BF16) for _ in range(copies)
    ]
    fws = [quantize_weight(w) for w in ws]
    return GemmInputs(
        x=xs,
        w=ws,
        rows=[quantize_activations(x, fw.data.shape[1]) for x, fw in zip(xs, fws, strict=True)],
        fw=fws,
        xt=[quantize_tensor(x) for x in xs],
        wt=[quantize_tensor(w) for w in ws],
    )


def triton_configs(smoke: bool, usable: dict[str, str] | None = None) -> list[object]:
    """The Triton GEMM configurations to time (`usable`: the preflight's verdicts; only the
    "ok" ones)."""
    if not CUDA and not smoke:
        return []
    from widebeam.kernels.fp8.triton_gemm import CONFIGS

    # The interpreter is slow: the smoke run takes one plain and one persistent configuration.
    configs = [CONFIGS[2], CONFIGS[5]] if smoke else list(CONFIGS)
    return [c for c in configs if usable is None or usable.get(c.name) == "ok"]


PREFLIGHT = "PREFLIGHT "


def preflight_child(names: list[str]) -> None:
    """`--preflight`: run each named configuration once at unaligned W3-like shapes against
    the reference, one line each; exit at the first CUDA fault (the context is gone)."""
    from widebeam.kernels.fp8.triton_gemm import CONFIGS, triton_fp8_matmul

    for cfg in (c for c in CONFIGS if c.name in names):
        try:
            # M = 1024 compiles the variant the timed row counts use (Triton specializes an
            # argument divisible by 16); 520 and out = 2000 check the masked edges.
            for m, n, k in ((1024, 2048, 2048), (520, 2000, 6144)):
                inp = gemm_inputs(m, n, k, 1, seed=m)
                got = triton_fp8_matmul(inp.rows[0], inp.fw[0], None, BF16, cfg)
                if CUDA:
                    torch.cuda.synchronize()
                error = relative_error(got, fp8_matmul_ref(inp.rows[0], inp.fw[0], None, BF16))
                if not error < 2e-2:
                    raise AssertionError(f"relative error {error:.2e} at {m}x{n}x{k}")
            print(f"{PREFLIGHT}{cfg.name} ok", flush=True)
        except Exception as err:
            text = f"{type(err).__name__}: {str(err).splitlines()[0][:160]}"
            print(f"{PREFLIGHT}{cfg.name} {text}", flush=True)
            if "CUDA" in text or "illegal" in text.lower():
                sys.exit(3)


def preflight(smoke: bool, budget: Budget) -> dict[str, str]:
    """Each Triton configuration's first run happens in a child process (which also fills
    Triton's on-disk cache for this one): a kernel that faults would otherwise take this
    process's CUDA context, and every later measurement, with it. -> name: "ok" or why not."""
    configs = triton_configs(smoke)
    if not CUDA:
        return {c.name: "ok" for c in configs}  # type: ignore[attr-defined]
    verdicts: dict[str, str] = {}
    for _ in range(3):
        todo = [c.name for c in configs if c.name not in verdicts]  # type: ignore[attr-defined]
        if not todo or not budget.left(0.35):
            break
        try:
            child = subprocess.run(
                [sys.executable, __file__, "--preflight", ",".join(todo)],
                capture_output=True,
                text=True,
                timeout=max(30.0, 0.35 * budget.seconds - budget.elapsed()),
            )
        except subprocess.TimeoutExpired as timeout:
            stdout = timeout.stdout or ""
            child = None
            lines = stdout if isinstance(stdout, str) else stdout.decode()
        else:
            lines = child.stdout
        last = "ok"
        for line in lines.splitlines():
            if line.startswith(PREFLIGHT):
                name, _, last = line.removeprefix(PREFLIGHT).partition(" ")
                verdicts[name] = last
        unknown = [n for n in todo if n not in verdicts]
        if not unknown or child is None or child.returncode == 0:
            break  # all done, or out of time
        if last == "ok":  # it died in the next one without a word: that one is the culprit
            tail = (child.stderr.strip().splitlines() or ["-"])[-1][:160]
            verdicts[unknown[0]] = f"child exited {child.returncode}: {tail}"
    for cfg in configs:
        verdicts.setdefault(cfg.name, "not checked (budget)")  # type: ignore[attr-defined]
    bad = {k: v for k, v in verdicts.items() if v != "ok"}
    print(f"  Triton preflight: {len(verdicts) - len(bad)} configurations ok; {bad or ''}")
    return verdicts


def gemm_variants(inp: GemmInputs, configs: list[object]) -> dict[str, Callable[[int], object]]:
    """variant -> call on rotating copy i."""

    def tensorwise(i: int, fast: bool) -> torch.Tensor:
        (xq, sx), (wq, sw) = inp.xt[i], inp.wt[i]
        return torch._scaled_mm(
            xq, wq.t(), scale_a=sx, scale_b=sw, out_dtype=BF16, use_fast_accum=fast
        )

    variants: dict[str, Callable[[int], object]] = {
        "bf16": lambda i: F.linear(inp.x[i], inp.w[i]),
        "quant": lambda i: quantize_activations(inp.x[i], inp.fw[i].data.shape[1]),
        "rowwise": lambda i: scaled_mm_rows(inp.rows[i], inp.fw[i], None, BF16),
        "rowwise-fast": lambda i: scaled_mm_rows(inp.rows[i], inp.fw[i], None, BF16, True),
        "tensorwise": lambda i: tensorwise(i, False),
        "tensorwise-fast": lambda i: tensorwise(i, True),
        "today": lambda i: fp8_linear_scaled_mm(inp.x[i], inp.fw[i], None),
    }
    if configs:
        from widebeam.kernels.fp8.triton_gemm import triton_fp8_matmul

        for cfg in configs:
            variants[f"triton:{cfg.name}"] = partial(  # type: ignore[attr-defined]
                lambda i, cfg: triton_fp8_matmul(inp.rows[i], inp.fw[i], None, BF16, cfg), cfg=cfg
            )
    return variants


ROWWISE_FAMILY = ("rowwise", "rowwise-fast", "today")  # same quantization as the reference


def measure_gemms(
    shape: Shape,
    rows: list[int],
    timer: Timer,
    budget: Budget,
    configs: list[object],
    out: list[dict],
) -> None:
    broken: dict[str, str] = {}  # variant -> first error (a config that cannot compile)
    for m in rows:
        for name, (n, k) in shape.gemms().items():
            if not budget.left(0.6):
                budget.skip(f"gemm {name} M={m}")
                continue
            copies = copies_for(2 * (m * k + n * k), cap=64 if CUDA else 2)
            inp = gemm_inputs(m, n, k, copies, seed=m + n + k)
            exact = inp.x[0].float() @ inp.w[0].float().t()  # [M, N] fp32
            ref = fp8_matmul_ref(inp.rows[0], inp.fw[0], None, BF16)
            flops = 2.0 * m * n * k
            bf16_us = None
            for variant, call in gemm_variants(inp, configs).items():
                row: dict[str, object] = {"gemm": name, "n": n, "k": k, "m": m}
                row |= {"variant": variant, "copies": copies}
                if variant in broken:
                    row["error"] = broken[variant]
                    out.append(row)
                    continue
                try:
                    got = call(0)
                    if variant != "quant":
                        assert isinstance(got, torch.Tensor)
                        row["err_exact"] = relative_error(got, exact)
                        if variant in ROWWISE_FAMILY or variant.startswith("triton:"):
                            row["err_ref"] = relative_error(got, ref)
                    del got
                    us, inner = timer.us([partial(call, i) for i in range(copies)])
                except Exception as err:  # one variant's failure is a result
                    row["error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:160]}"
                    if variant.startswith("triton:"):
                        broken[variant] = str(row["error"])
                    out.append(row)
                    continue
                row |= {"us": us, "calls_per_replay": inner}
                if variant != "quant":
                    row["tflops"] = flops / us / 1e6
                if variant == "bf16":
                    bf16_us = us
                if bf16_us is not None and variant != "quant":
                    row["vs_bf16"] = bf16_us / us
                out.append(row)
            del inp, exact, ref
            if CUDA:
                torch.cuda.empty_cache()
        print(f"  gemm M={m} done ({budget.elapsed():.0f} s)", flush=True)


def lookup(results: list[dict], **keys: object) -> dict | None:
    for row in results:
        if all(row.get(k) == v for k, v in keys.items()) and "us" in row:
            return row
    return None


def fastest(results: list[dict], gemm: str, m: int, precise_only: bool) -> dict | None:
    """The fastest GEMM (not the quantization, not the bf16 one) of `gemm` at `m` rows among
    the row-wise variants (`precise_only`: without fast accumulation)."""
    candidates = [
        r
        for r in results
        if r["gemm"] == gemm
        and r["m"] == m
        and "us" in r
        and (r["variant"].startswith("triton:") or r["variant"] in ("rowwise", "rowwise-fast"))
        and not (precise_only and (r["variant"] == "rowwise-fast" or is_fast_triton(r)))
    ]
    return min(candidates, key=lambda r: r["us"]) if candidates else None


def is_fast_triton(row: dict) -> bool:
    """A Triton configuration without promoted accumulation (its name has no `x` flag)."""
    return row["variant"].startswith("triton:") and not row["variant"].endswith("x")


GEMM_LEGEND = """\
Columns: one per row count M, each `us per call (TFLOP/s, speed-up over bf16 = bf16 us / us)`.
Variants: bf16 = F.linear in bf16 (cuBLAS); quant = the per-token activation quantization pass
alone (Triton: reads the bf16 row, writes e4m3 + fp32 scale; no FLOPs); rowwise =
torch._scaled_mm with a per-token and a per-channel scale, bf16 out (fp8_accumulation=precise);
-fast = use_fast_accum=True (FP8 partial sums kept in the tensor cores' reduced precision, not
promoted to fp32 as K goes: fp8_accumulation=fast, the serving default); tensorwise =
_scaled_mm with one scale per matrix (scales computed outside the timed call; to see whether
the row-wise kernel itself is the slower one);
triton:BMxBNxBK wW sS [-p persistent] [-x promoted accumulation] =
widebeam/kernels/fp8/triton_gemm.py;
today = quant + rowwise as one FP8 linear runs it unfused (o_proj keeps paying this)."""


def gemm_tables(shape: Shape, rows: list[int], results: list[dict]) -> None:
    measured = sorted(m for m in rows if any(r["m"] == m for r in results))
    for name, (n, k) in shape.gemms().items():
        variants = list(dict.fromkeys(r["variant"] for r in results if r["gemm"] == name))
        table = []
        for variant in variants:
            cells: list[object] = [variant]
            for m in measured:
                row = next(
                    (r for r in results if (r["gemm"], r["m"], r["variant"]) == (name, m, variant)),
                    None,
                )
                if row is None or "us" not in row:
                    cells.append("error" if row and "error" in row else "-")
                    continue
                if "tflops" in row:
                    speedup = fmt(row.get("vs_bf16"), ".2f")
                    cells.append(f"{row['us']:.1f} ({row['tflops']:.0f} TF, {speedup}x)")
                else:
                    cells.append(f"{row['us']:.1f}")
            table.append(cells)
        print(f"\n### {name}: {n} x {k} (out x in)")
        print(markdown_table(["variant", *[f"M={m}" for m in measured]], table))
    errors = sorted({(r["variant"], r["error"]) for r in results if "error" in r})
    for variant, error in errors:
        print(f"  error in {variant}: {error}")


def error_table(shape: Shape, results: list[dict]) -> None:
    table = []
    variants = list(dict.fromkeys(r["variant"] for r in results if "err_exact" in r))
    for variant in variants:
        cells: list[object] = [variant]
        for name in shape.gemms():
            rows = [r for r in results if r["gemm"] == name and r["variant"] == variant]
            ref = [r["err_ref"] for r in rows if "err_ref" in r]
            exact = [r["err_exact"] for r in rows if "err_exact" in r]
            cells.append(
                f"{fmt(max(ref) if ref else None, '.1e')} / "
                f"{fmt(100 * max(exact) if exact else None, '.2f')}%"
            )
        table.append(cells)
    print(
        "\nCorrectness before timing, worst over M: relative Frobenius error against the FP8 "
        "torch reference of the same row-wise quantization (fp32 sum; row-wise variants only) "
        "/ against the exact fp32 product of the bf16 operands (bf16's own rounding ~0.2%, "
        "FP8's ~3.5-4%)."
    )
    print(markdown_table(["variant", *shape.gemms()], table))


def projection_table(shape: Shape, rows: list[int], results: list[dict]) -> list[dict]:
    """Per decode step (x 28 layers), the four GEMMs of a layer at each M: bf16; FP8 unfused
    (today); FP8 with the quantization fused into the norms / SiLU (o still quantizes); the
    same with the fastest GEMM per layer, precise only and any."""
    out, table = [], []
    for m in sorted(rows):
        ms: dict[str, float | None] = {"bf16": 0.0, "today": 0.0, "fused": 0.0}
        ms |= {"fastest precise": 0.0, "fastest": 0.0}
        for name in shape.gemms():
            bf16 = lookup(results, gemm=name, m=m, variant="bf16")
            today = lookup(results, gemm=name, m=m, variant="today")
            quant = lookup(results, gemm=name, m=m, variant="quant")
            rowwise = lookup(results, gemm=name, m=m, variant="rowwise")
            q_us = quant["us"] if name == "o" and quant else 0.0
            parts = {
                "bf16": bf16 and bf16["us"],
                "today": today and today["us"],
                "fused": rowwise and rowwise["us"] + q_us,
            }
            for label, precise in (("fastest precise", True), ("fastest", False)):
                best = fastest(results, name, m, precise)
                parts[label] = best and best["us"] + q_us
            for key, us in parts.items():
                cur = ms[key]
                ms[key] = None if us is None or cur is None else cur + us * LAYERS / 1000
        bf16_ms = ms["bf16"]
        table.append(
            [m]
            + [
                f"{fmt(v, '.3f')} ({fmt(bf16_ms / v if bf16_ms and v else None, '.2f')}x)"
                for v in ms.values()
            ]
        )
        out.append({"m": m, **ms})
    print(
        "\nThe four GEMMs of a layer x 28 layers (ms per decode step; speed-up over bf16): "
        "today = each FP8 linear quantizes its input; fused = the norms and the SiLU product "
        "write FP8 (commit 812b9b8), so qkv, gate_up and down run the row-wise GEMM alone and o "
        "adds its quantization pass; fastest = the fastest row-wise GEMM per shape (any "
        "variant above; precise: no fast accumulation)."
    )
    print(markdown_table(["M", "bf16", "today", "fused", "fastest precise", "fastest"], table))
    return out


# ----------------------------------------------------------------------------- part 2: layers


# Bytes per second the floors of part 2 assume (docs: ~4.3 TB/s copy on the H200).
HBM_BYTES_PER_S = 4.3e12
# Variants of part 2 (keys of its rows): the quantization pass alone and the fused SiLU kernel
# as serving runs them (rows wider than QUANT_MAX_CHUNK / SILU_MAX_CHUNK in two passes over
# chunks, narrower ones in one pass over the whole row), and the other way where the row is
# wider than TWO_PASS_CHUNK ("other": two passes over TWO_PASS_CHUNK-column chunks if serving
# makes one, one pass if it makes two). The other ones are checked against the Triton kernels
# as serving launches them (CHECKED_AGAINST: not timed; the same calls as serving's on CUDA,
# while on the smoke run's CPU serving's are the torch reference).
QUANT, QUANT_OTHER = "quant", "quant, other"
FUSED, FUSED_OTHER = "fused (FP8 out)", "fused, other"
CHECKED_AGAINST = {QUANT_OTHER: "quant, triton", FUSED_OTHER: "fused, triton"}
TWO_PASS_CHUNK = 2048


def other_chunk(width: int, serving_chunk: int) -> int:
    """The max_chunk of the way serving does not take at `width`: one pass over the whole row
    where serving makes two, two over TWO_PASS_CHUNK where serving makes one."""
    from widebeam.kernels.fp8.triton_quantize import chunking

    if chunking(width, serving_chunk)["ONE_CHUNK"]:
        return min(TWO_PASS_CHUNK, serving_chunk) if width > TWO_PASS_CHUNK else 16
    return 1 << (width - 1).bit_length()


def passes(width: int, max_chunk: int) -> int:
    from widebeam.kernels.fp8.triton_quantize import chunking

    return 1 if chunking(width, max_chunk)["ONE_CHUNK"] else 2


def layer_calls(shape: Shape, m: int, copies: int) -> dict[str, dict[str, Callable[[int], object]]]:
    """kernel family -> {variant: call on rotating copy i}, on fresh random inputs. The
    one-pass variants appear where serving's default reads the row in chunks (Triton)."""
    from widebeam.kernels.fp8.triton_quantize import QUANT_MAX_CHUNK, quantize_rows_triton
    from widebeam.kernels.layers.triton_fp8_layers import SILU_MAX_CHUNK, silu_mul_fp8_triton

    hidden, inter = shape.hidden, shape.inter
    gen = torch.Generator(device=DEVICE).manual_seed(m)
    xs = [torch.randn(m, hidden, device=DEVICE, generator=gen).to(BF16) for _ in range(copies)]
    res = [torch.randn(m, hidden, device=DEVICE, generator=gen).to(BF16) for _ in xs]
    w = (torch.rand(hidden, device=DEVICE, generator=gen) + 0.5).to(BF16)
    gate_up = [(torch.randn(m, 2 * inter, device=DEVICE, generator=gen) * 3).to(BF16) for _ in xs]

    def halves(i: int) -> tuple[torch.Tensor, torch.Tensor]:  # views, row stride 2 x inter
        return gate_up[i][:, :inter], gate_up[i][:, inter:]

    # The layers' bf16 outputs: what the quantization pass alone reads (o's and down's inputs
    # have these widths: hidden and inter)
    normed = [rms_norm(x, w, EPS) for x in xs]
    products = [silu_mul(*halves(i)) for i in range(copies)]

    def quant_calls(outs: list[torch.Tensor], width: int) -> dict[str, Callable[[int], object]]:
        calls: dict[str, Callable[[int], object]] = {
            QUANT: lambda i: quantize_activations(outs[i], width)
        }
        if width > TWO_PASS_CHUNK or SMOKE:  # (the smoke run: to run the code)
            other = other_chunk(width, QUANT_MAX_CHUNK)
            calls[QUANT_OTHER] = lambda i: quantize_rows_triton(outs[i], width, max_chunk=other)
            calls[CHECKED_AGAINST[QUANT_OTHER]] = lambda i: quantize_rows_triton(outs[i], width)
        return calls

    silu: dict[str, Callable[[int], object]] = {
        "layer (bf16 out)": lambda i: silu_mul(*halves(i)),
        **quant_calls(products, inter),
        "layer + quant": lambda i: quantize_activations(silu_mul(*halves(i)), inter),
        FUSED: lambda i: silu_mul_fp8(*halves(i), inter),
    }
    if inter > TWO_PASS_CHUNK or SMOKE:
        other = other_chunk(inter, SILU_MAX_CHUNK)
        silu[FUSED_OTHER] = lambda i: silu_mul_fp8_triton(*halves(i), inter, max_chunk=other)
        silu[CHECKED_AGAINST[FUSED_OTHER]] = lambda i: silu_mul_fp8_triton(*halves(i), inter)
    return {
        "rms_norm": {
            "layer (bf16 out)": lambda i: rms_norm(xs[i], w, EPS),
            **quant_calls(normed, hidden),
            "layer + quant": lambda i: quantize_activations(rms_norm(xs[i], w, EPS), hidden),
            FUSED: lambda i: rms_norm_fp8(xs[i], w, EPS, hidden),
        },
        "add_rms_norm": {
            "layer (bf16 out)": lambda i: add_rms_norm(xs[i], res[i], w, EPS),
            **quant_calls(normed, hidden),
            "layer + quant": lambda i: quantize_activations(
                add_rms_norm(xs[i], res[i], w, EPS)[0], hidden
            ),
            FUSED: lambda i: add_rms_norm_fp8(xs[i], res[i], w, EPS, hidden)[0],
        },
        "silu_mul": silu,
    }


def floor_us(shape: Shape, family: str, m: int) -> dict[str, float]:
    """The bytes the fused kernel and the quantization pass alone move, at HBM_BYTES_PER_S:
    bf16 in, e4m3 + an fp32 scale per row out (add_rms_norm also reads the residual and writes
    the new one)."""
    width = shape.inter if family == "silu_mul" else shape.hidden
    quant = m * width * 2 + m * width + 4 * m
    fused = {
        "rms_norm": m * width * 2 + m * width + 4 * m,
        "add_rms_norm": 3 * m * width * 2 + m * width + 4 * m,
        "silu_mul": 2 * m * width * 2 + m * width + 4 * m,
    }[family]
    return {
        "quant_floor_us": quant / HBM_BYTES_PER_S * 1e6,
        "fused_floor_us": fused / HBM_BYTES_PER_S * 1e6,
    }


def passes_of(shape: Shape, family: str) -> dict[str, int]:
    """How many passes over a row serving's kernels make (the other way: the other count)."""
    from widebeam.kernels.fp8.triton_quantize import QUANT_MAX_CHUNK
    from widebeam.kernels.layers.triton_fp8_layers import SILU_MAX_CHUNK

    width = shape.inter if family == "silu_mul" else shape.hidden
    fused = passes(width, SILU_MAX_CHUNK) if family == "silu_mul" else 1
    return {"quant_passes": passes(width, QUANT_MAX_CHUNK), "fused_passes": fused}


def same_rows(a: object, b: object) -> tuple[int, bool]:
    """(bytes that differ, scales equal) of two Fp8Rows."""
    assert isinstance(a, Fp8Rows) and isinstance(b, Fp8Rows)
    mismatched = int((a.data.view(torch.uint8) != b.data.view(torch.uint8)).sum())
    return mismatched, bool(torch.equal(a.scale, b.scale))


def measure_layers(
    shape: Shape, rows: list[int], timer: Timer, budget: Budget, out: list[dict]
) -> None:
    for m in rows:
        if not budget.left(0.65):
            budget.skip(f"layers M={m}")
            continue
        copies = copies_for(2 * m * 2 * shape.inter, cap=64 if CUDA else 2)
        for family, calls in layer_calls(shape, m, copies).items():
            row: dict[str, object] = {"family": family, "m": m, "copies": copies}
            row |= floor_us(shape, family, m) | passes_of(shape, family)
            try:
                mismatched, scales = same_rows(calls["layer + quant"](0), calls[FUSED](0))
                row["mismatched_bytes"], row["scales_equal"] = mismatched, scales
                # the other way against serving's Triton kernels: the same bytes and scales
                for other, serving in CHECKED_AGAINST.items():
                    if other in calls:
                        mismatched, scales = same_rows(calls[other](0), calls.pop(serving)(0))
                        row["mismatched_bytes"] = int(row["mismatched_bytes"]) + mismatched
                        row["scales_equal"] = bool(row["scales_equal"]) and scales
                for label, call in calls.items():
                    row[label] = timer.us([partial(call, i) for i in range(copies)])[0]
            except Exception as err:
                row["error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:160]}"
            out.append(row)
        if CUDA:
            torch.cuda.empty_cache()


def with_passes(us: float | None, count: int) -> str:
    return "-" if us is None else f"{us:.1f} ({count} pass{'es' if count > 1 else ''})"


def layer_table(results: list[dict]) -> None:
    from widebeam.kernels.fp8.triton_quantize import QUANT_MAX_CHUNK
    from widebeam.kernels.layers.triton_fp8_layers import SILU_MAX_CHUNK

    table = []
    for r in results:
        if "error" in r:
            table.append([r["family"], r["m"], r["error"], *[""] * 8])
            continue
        unfused, fused = r["layer + quant"], r[FUSED]
        saved = unfused - fused
        identical = r["mismatched_bytes"] == 0 and r["scales_equal"]
        table.append(
            [
                r["family"],
                r["m"],
                f"{r['layer (bf16 out)']:.1f}",
                with_passes(r[QUANT], r["quant_passes"]),
                with_passes(r.get(QUANT_OTHER), 3 - r["quant_passes"]),
                f"{unfused:.1f}",
                with_passes(fused, r["fused_passes"]),
                with_passes(r.get(FUSED_OTHER), 3 - r["fused_passes"]),
                f"{r['quant_floor_us']:.1f} / {r['fused_floor_us']:.1f}",
                f"{saved:.1f}",
                f"{saved * LAYERS / 1000:.3f}",
                "yes" if identical else f"NO ({r['mismatched_bytes']} bytes)",
            ]
        )
    print(
        "\nThe kernels that feed the FP8 GEMMs, us per call: the layer alone (bf16 out, as the "
        "bf16 model runs it); the quantization pass alone on the layer's output (o's input is "
        "hidden wide, down's is the MLP's width) as serving runs it (rows wider than "
        f"{QUANT_MAX_CHUNK} columns in two passes over chunks of that many, the others in one "
        "pass over the whole row held in registers) and the other way (rows wider than "
        f"{TWO_PASS_CHUNK}: one pass if serving makes two, two over {TWO_PASS_CHUNK}-column "
        "chunks if it makes one); the layer then the quantization pass (FP8 unfused); the fused "
        "kernel writing FP8 rows + scales as serving runs it (the SiLU product in two passes "
        f"past {SILU_MAX_CHUNK} columns) and the SiLU product the other way; the floor: the "
        "bytes at 4.3 TB/s (quant / fused); saved: unfused - fused per call and per decode step "
        "(x 28 layers; rms_norm and add_rms_norm: one of the two norms of a layer each); "
        "bit-identical: the fused kernel's FP8 bytes and scales equal the unfused ones, and the "
        "other way's serving's."
    )
    headers = ["kernel", "M", "layer us", "quant us", "quant other us", "layer + quant us"]
    headers += ["fused us", "fused other us", "floor us", "saved us", "saved ms x 28"]
    print(markdown_table([*headers, "bit-identical"], table))


# ----------------------------------------------------------------------------- part 3: chain


class IdentityAttention:
    """Attention replaced by its query: the chain times what the linear layers and the kernels
    around them cost, which the FP8 path changes."""

    def attend(
        self, layer_idx: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> torch.Tensor:  # [N, n_heads, head_dim]
        return q


def gemm_paths(
    shape: Shape, results: list[dict], m: int, precise_only: bool
) -> dict[str, Fp8Gemm] | None:
    """GEMM name -> the path of its fastest row-wise variant at `m` rows, or None."""
    paths = {}
    for name in shape.gemms():
        best = fastest(results, name, m, precise_only)
        if best is None:
            return None
        paths[name] = path_of(best["variant"])
    return paths


def path_of(variant: str) -> Fp8Gemm:
    if variant == "rowwise":
        return SCALED_MM
    if variant == "rowwise-fast":
        return SCALED_MM_FAST
    from widebeam.kernels.fp8.triton_gemm import CONFIGS, triton_fp8_matmul

    cfg = next(c for c in CONFIGS if f"triton:{c.name}" == variant)
    return Fp8Gemm(variant, quantize_activations, partial(triton_fp8_matmul, config=cfg))


def layer_linears(model: CausalLM) -> dict[str, list[Fp8Linear]]:
    out: dict[str, list[Fp8Linear]] = {"qkv": [], "o": [], "gate_up": [], "down": []}
    for layer in model.model.layers:
        out["qkv"].append(layer.self_attn.qkv_fp8)
        out["o"].append(layer.self_attn.o_proj)
        out["gate_up"].append(layer.mlp.gate_up_fp8)
        out["down"].append(layer.mlp.down_proj)
    return out


def measure_chain(
    shape: Shape,
    rows: list[int],
    timer: Timer,
    budget: Budget,
    gemm_results: list[dict],
    out: list[dict],
) -> None:
    layers = 2
    if not budget.left(0.8):
        budget.skip("chain (all)")
        return
    path = write_tiny_model(
        Path(tempfile.mkdtemp()) / "w3-layers",
        hidden_size=shape.hidden,
        intermediate_size=shape.inter,
        num_layers=layers,
        num_heads=shape.heads,
        num_kv_heads=shape.kv_heads,
        head_dim=shape.head_dim,
        dtype=DType.BFLOAT16,
        init_std=0.02,
    )
    bf16 = CausalLM.from_pretrained(path, dtype=BF16, device=DEVICE)
    # Precise GEMMs as loaded; the fast-accumulation mode (the serving default) swaps them.
    fp8 = CausalLM.from_pretrained(
        path, dtype=BF16, device=DEVICE, quantization="fp8", fp8_accumulation="precise"
    )
    linears = layer_linears(fp8)
    original = {name: [lin.gemm for lin in lins] for name, lins in linears.items()}
    attn = IdentityAttention()
    for m in rows:
        if not budget.left(0.85):
            budget.skip(f"chain M={m}")
            continue
        gen = torch.Generator().manual_seed(m)
        ids = [torch.randint(0, 64, (m,), generator=gen).to(DEVICE) for _ in range(2)]
        pos = [torch.randint(100, 4000, (m,), generator=gen).to(DEVICE) for _ in range(2)]
        modes: list[tuple[str, CausalLM, bool, dict[str, Fp8Gemm] | None]] = [
            ("bf16", bf16, False, None),
            ("fp8 unfused (before)", fp8, False, None),
            ("fp8 fused", fp8, True, None),
        ]
        if CUDA:
            fast = dict.fromkeys(linears, SCALED_MM_FAST)
            modes.append(("fp8 fused, fast accumulation (serving default)", fp8, True, fast))
            for label, precise in (("fastest precise", True), ("fastest", False)):
                paths = gemm_paths(shape, gemm_results, m, precise)
                if paths is not None:
                    named = ", ".join(f"{k} {v.name}" for k, v in paths.items())
                    modes.append((f"fp8 fused, {label} GEMMs: {named}", fp8, True, paths))
        bf16_us = None
        for label, model, fused, paths in modes:
            row: dict[str, object] = {"m": m, "mode": label, "layers": layers}
            try:
                set_fused_inputs(model, fused)
                for name, lins in linears.items():
                    for lin, gemm in zip(lins, original[name], strict=True):
                        lin.gemm = paths[name] if paths else gemm
                with torch.inference_mode():
                    calls = [partial(model, ids[i], pos[i], attn) for i in range(2)]
                    us, _ = timer.us(calls)
                row["us"] = us
                bf16_us = us if label == "bf16" else bf16_us
                if bf16_us:
                    row["vs_bf16"] = bf16_us / us
            except Exception as err:
                row["error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:160]}"
            out.append(row)
    set_fused_inputs(fp8, True)
    for name, lins in linears.items():
        for lin, gemm in zip(lins, original[name], strict=True):
            lin.gemm = gemm


def chain_table(results: list[dict]) -> None:
    table = []
    for r in results:
        if "error" in r:
            table.append([r["m"], r["mode"], r["error"], "", ""])
            continue
        per_layer_ms = r["us"] / r["layers"] / 1000
        table.append(
            [
                r["m"],
                r["mode"],
                f"{per_layer_ms:.3f}",
                f"{per_layer_ms * LAYERS:.2f}",
                fmt(r.get("vs_bf16"), ".2f"),
            ]
        )
    print(
        "\nTwo W3 decoder layers in one CUDA graph, attention replaced by the identity (norms, "
        "q/k norm + rope, the four GEMMs, SiLU; plus the embedding and final norm once): ms per "
        "layer, x 28 layers, and the speed-up over bf16 (before = every FP8 linear quantizes "
        "its input; fp8 rows without 'fast' run precise _scaled_mm; fast accumulation = "
        "use_fast_accum=True in every _scaled_mm, fp8_accumulation's default)."
    )
    print(markdown_table(["M", "mode", "ms / layer", "ms x 28", "vs bf16"], table))


# ----------------------------------------------------------------------------- part 4: kernels


def kernel_names(
    shape: Shape,
    m: int,
    budget: Budget,
    configs: list[object],
    gemm_results: list[dict],
    out: list[dict],
) -> None:
    """One eager call of each variant under the profiler (the Triton GEMM: its fastest
    configuration at `m` rows, else the first)."""
    from torch.profiler import ProfilerActivity, profile

    for name, (n, k) in shape.gemms().items():
        if not budget.left(1.0):
            budget.skip(f"kernel names {name}")
            continue
        timed = [
            r
            for r in gemm_results
            if r["gemm"] == name and r["m"] == m and r["variant"].startswith("triton:")
        ]
        best = min((r for r in timed if "us" in r), key=lambda r: r["us"], default=None)
        chosen = [
            c
            for c in configs
            if best and f"triton:{c.name}" == best["variant"]  # type: ignore[attr-defined]
        ]
        inp = gemm_inputs(m, n, k, 1, seed=1)
        for variant, call in gemm_variants(inp, chosen or configs[:1]).items():
            try:
                call(0)
                torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    call(0)
                    torch.cuda.synchronize()
                names = [
                    e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
                ]
                out.append({"gemm": name, "m": m, "variant": variant, "kernels": names})
            except Exception as err:
                out.append({"gemm": name, "m": m, "variant": variant, "error": str(err)[:160]})
        del inp


def kernel_table(results: list[dict]) -> None:
    table = []
    for r in results:
        names = r.get("kernels")
        text = " + ".join(n[:110] for n in names) if names else r.get("error", "-")
        table.append([r["gemm"], r["m"], r["variant"], len(names or []), text])
    print(
        "\nDevice kernels one call launches (torch profiler; names cut at 110 characters): "
        "cuBLASLt's are named sm90_xmma_gemm_* / nvjet_*, CUTLASS's cutlass::*, Triton's after "
        "the kernel (_fp8_gemm_kernel, _quantize_rows_kernel)."
    )
    print(markdown_table(["GEMM", "M", "variant", "kernels", "names"], table))


# ----------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", default="6144,1024,12288,512", help="row counts M, in order")
    parser.add_argument("--budget-s", type=float, default=220.0, help="stop parts past this")
    parser.add_argument("--only", default="gemm,layers,chain,kernels")
    parser.add_argument("--samples", type=int, default=9, help="timed graph replays")
    parser.add_argument("--target-ms", type=float, default=3.0, help="device time per replay")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU")
    parser.add_argument("--preflight", default="", help=argparse.SUPPRESS)  # the child's mode
    args = parser.parse_args()
    if args.preflight:
        preflight_child(args.preflight.split(","))
        return
    smoke = args.smoke
    shape = TINY if smoke else W3
    # One row count not a multiple of any tile: every kernel's masked edge runs.
    rows = [24] if smoke else [int(r) for r in args.rows.split(",")]
    parts = set(args.only.split(","))
    timer = Timer(1 if smoke else args.samples, args.target_ms, max_calls=400)
    budget = Budget(args.budget_s)
    env = environment() | {"rows": rows, "smoke": smoke, "shape": shape.__dict__}
    report: dict[str, object] = {"env": env, "args": vars(args), "skipped": budget.skipped}
    gemm: list[dict] = []
    print(f"FP8 GEMM variants at the W3 shape, {env}", flush=True)
    verdicts = preflight(smoke, budget) if parts & {"gemm", "chain", "kernels"} else {}
    report["triton_preflight"] = verdicts
    configs = triton_configs(smoke, verdicts)
    if "gemm" in parts:
        measure_gemms(shape, rows, timer, budget, configs, gemm)
        report["gemm"] = gemm
        print("\n## 1. GEMMs\n" + GEMM_LEGEND)
        gemm_tables(shape, rows, gemm)
        error_table(shape, gemm)
        report["projection"] = projection_table(shape, rows, gemm)
        write_json("fp8_gemm", report)
    if "layers" in parts:
        layers: list[dict] = []
        measure_layers(shape, rows, timer, budget, layers)
        report["layers"] = layers
        print("\n## 2. The layer kernels that feed the GEMMs")
        layer_table(layers)
        write_json("fp8_gemm", report)
    if "chain" in parts:
        chain: list[dict] = []
        measure_chain(shape, rows, timer, budget, gemm, chain)
        report["chain"] = chain
        print("\n## 3. Decoder layers end to end (no attention)")
        chain_table(chain)
        write_json("fp8_gemm", report)
    if "kernels" in parts and CUDA:
        names: list[dict] = []
        kernel_names(shape, rows[0], budget, configs, gemm, names)
        report["kernels"] = names
        print("\n## 4. Which kernels run")
        kernel_table(names)
    report["elapsed_s"] = budget.elapsed()
    write_json("fp8_gemm", report)
    print(f"\ndone in {budget.elapsed():.0f} s; skipped for the budget: {budget.skipped or 'none'}")


if __name__ == "__main__":
    main()
