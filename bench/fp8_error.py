"""FP8 GEMM error (issue 20): per decoder layer, each of its four GEMMs (fused q/k/v, o, fused
gate/up, down) in W8A8 FP8 against the exact product of the bf16 weights, on the W3 model's
random weights and random activations; beside it the bf16 GEMM's own error, and on CUDA how far
`torch._scaled_mm` is from the plain-torch reference of the same math
(`widebeam/kernels/fp8/`). With
`--time` (CUDA): each GEMM's bf16 and FP8 time at `--rows` rows.

    python bench/fp8_error.py [--rows 6144] [--time] [--smoke]

`--smoke`: the tiny test model on the CPU (tests/bench/test_fp8_error_smoke.py).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from harness import DEVICE, environment, markdown_table, model_dir, write_json

from widebeam.kernels.fp8.torch_ref import fp8_linear_ref
from widebeam.services.decoder.config import DType
from widebeam.services.decoder.model.fp8_linear import Fp8Linear
from widebeam.services.decoder.model.transformer import CausalLM
from widebeam.services.decoder.testing.tiny_model import write_tiny_model

W3_LEVELS = (512, 512, 512)  # genrec_throughput.py's SID vocabulary
GEMMS = ("qkv", "o", "gate_up", "down")


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """||got - want||_F / ||want||_F, in fp32."""
    return float((got.float() - want).norm() / want.norm())


def layer_pairs(
    bf16: CausalLM, fp8: CausalLM, index: int
) -> dict[str, tuple[torch.Tensor, Fp8Linear]]:
    """Each GEMM of layer `index`: (the bf16 weight [out, in], its FP8 linear)."""
    a, b = bf16.model.layers[index], fp8.model.layers[index]
    return {
        "qkv": (a.self_attn.qkv_weight, b.self_attn.qkv_fp8),
        "o": (a.self_attn.o_proj.weight, b.self_attn.o_proj),
        "gate_up": (a.mlp.gate_up_weight, b.mlp.gate_up_fp8),
        "down": (a.mlp.down_proj.weight, b.mlp.down_proj),
    }


def cuda_ms(fn: Callable[[], torch.Tensor], reps: int = 20) -> float:
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def measure(path: Path, rows: int, timed: bool) -> list[dict[str, object]]:
    bf16 = CausalLM.from_pretrained(path, dtype=torch.bfloat16, device=DEVICE)
    fp8 = CausalLM.from_pretrained(path, dtype=torch.bfloat16, device=DEVICE, quantization="fp8")
    generator = torch.Generator(device=DEVICE).manual_seed(0)
    results = []
    with torch.inference_mode():
        for index in range(bf16.config.num_hidden_layers):
            for gemm, (weight, linear) in layer_pairs(bf16, fp8, index).items():
                x = torch.randn(
                    rows, weight.shape[1], device=DEVICE, dtype=torch.bfloat16, generator=generator
                )
                exact = x.float() @ weight.float().t()  # [rows, out] fp32
                got = linear(x)
                row: dict[str, object] = {
                    "layer": index,
                    "gemm": gemm,
                    "shape": list(weight.shape),
                    "fp8_rel_error": relative_error(got, exact),
                    "bf16_rel_error": relative_error(F.linear(x, weight), exact),
                    "gemm_path": linear.gemm.name,
                    "vs_reference": relative_error(
                        got, fp8_linear_ref(x, linear.fp8_weight, None).float()
                    ),
                }
                if timed and DEVICE == "cuda":
                    row["bf16_ms"] = cuda_ms(lambda x=x, w=weight: F.linear(x, w))
                    row["fp8_ms"] = cuda_ms(lambda x=x, lin=linear: lin(x))
                results.append(row)
    return results


def summary(results: list[dict[str, object]]) -> list[list[object]]:
    table = []
    for gemm in GEMMS:
        rows = [r for r in results if r["gemm"] == gemm]
        errors = [float(r["fp8_rel_error"]) for r in rows]
        worst = max(rows, key=lambda r: float(r["fp8_rel_error"]))
        cells: list[object] = [
            gemm,
            "x".join(map(str, rows[0]["shape"])),
            f"{100 * statistics.mean(errors):.2f}%",
            f"{100 * max(errors):.2f}% (layer {worst['layer']})",
            f"{100 * statistics.mean(float(r['bf16_rel_error']) for r in rows):.3f}%",
            f"{max(float(r['vs_reference']) for r in rows):.1e}",
        ]
        if "fp8_ms" in rows[0]:
            bf16_ms = sum(float(r["bf16_ms"]) for r in rows)
            fp8_ms = sum(float(r["fp8_ms"]) for r in rows)
            cells += [f"{bf16_ms:.3f}", f"{fp8_ms:.3f}", f"{bf16_ms / fp8_ms:.2f}x"]
        table.append(cells)
    return table


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=6144, help="activation rows per GEMM")
    parser.add_argument("--time", action="store_true", help="CUDA: time each GEMM, bf16 and FP8")
    parser.add_argument("--smoke", action="store_true", help="tiny model on the CPU")
    args = parser.parse_args()
    if args.smoke:
        path = write_tiny_model(Path(tempfile.mkdtemp()) / "tiny", dtype=DType.BFLOAT16)
        rows = 32
    else:
        path, rows = model_dir("qwen3-1.7b", sid_levels=W3_LEVELS), args.rows
    results = measure(path, rows, args.time)
    env = environment() | {"rows": rows, "smoke": args.smoke}
    write_json("fp8_error", {"env": env, "rows": results})
    headers = ["GEMM", "out x in", "FP8 error mean", "FP8 error max", "bf16 error", "vs reference"]
    if args.time and DEVICE == "cuda":
        headers += ["bf16 ms (all layers)", "FP8 ms (all layers)", "bf16 / FP8"]
    print(f"\nFP8 GEMM relative Frobenius error vs the exact bf16-weight product, {env}")
    print(markdown_table(headers, summary(results)))


if __name__ == "__main__":
    main()
