"""Tile and option sweep of the ragged causal prefill kernel
(`widebeam/kernels/attention/triton_prefill.py`) at Qwen3-1.7B's heads (16 query / 8 KV
heads of 128): one prompt of 1,000 and of 5,000 tokens, and W4's three prompts of 2,451, bf16
K/V and FP8 K/V (widened before the kernel, as the engine's are). For each (query rows, key
block, warps, stages) and each of the kernel's options (unmasked tiles before the diagonal,
K/V through tensor descriptors, the work list longest first), the median µs of one call
(`triton.testing.do_bench`), TFLOP/s over the causal half, and the error against the fp32
torch reference (a configuration that is wrong is reported, never timed as a winner).

    python bench/prefill_tiles.py [--tokens 1000,5000,3x2451] [--tiles all|few] [--smoke]
"""

from __future__ import annotations

import argparse
import itertools

import torch
from smoke_interpreter import use_interpreter_for_smoke

SMOKE = use_interpreter_for_smoke()  # before any kernel module is imported

from harness import DEVICE, environment, markdown_table, write_json  # noqa: E402

from widebeam.kernels.attention.torch_ref import causal_prefill  # noqa: E402
from widebeam.kernels.attention.triton_common import gqa_padded  # noqa: E402
from widebeam.kernels.attention.triton_prefill import (  # noqa: E402
    prefill_block_q,
    prefill_work,
    ragged_causal_prefill,
)
from widebeam.kernels.kv.fp8_kv import KvScales, quantize_kv  # noqa: E402

Q_HEADS, KV_HEADS, DIM = 16, 8, 128


TILE_SWEEP = tuple(itertools.product((64, 128), (32, 64, 128), (4, 8), (2, 3, 4)))
FEW_TILES = ((128, 64, 8, 3), (128, 128, 8, 3), (64, 128, 4, 3), (64, 64, 4, 4))
OPTIONS = tuple(itertools.product((False, True), repeat=3))  # split diagonal, TMA, heavy first


def segment_lengths(text: str) -> list[int]:
    """Prompt lengths of a size: "5000" -> [5000], "3x2451" -> [2451, 2451, 2451]."""
    count, _, length = text.rpartition("x")
    return [int(length)] * int(count or 1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", default="1000,5000,3x2451")
    parser.add_argument(
        "--tiles", choices=("all", "few"), default="few",
        help="all: every tile that may fit, default options only; few: four tiles besides "
        "the default, each with every option",
    )  # fmt: skip
    parser.add_argument("--smoke", action="store_true", help="CPU: the options, 64 tokens")
    args = parser.parse_args()
    import triton.testing

    sizes = ["2x40"] if args.smoke else args.tokens.split(",")
    gqa_p = gqa_padded(Q_HEADS, KV_HEADS)
    default = (prefill_block_q(Q_HEADS, KV_HEADS) * gqa_p, 64, 4, 3)
    plain = (False, False, False)
    if args.smoke:
        configs = [(default, options) for options in OPTIONS]
    elif args.tiles == "all":
        configs = [(tile, plain) for tile in (default, *(t for t in TILE_SWEEP if t != default))]
    else:
        configs = [(tile, options) for tile in (default, *FEW_TILES) for options in OPTIONS]
    dtype = torch.bfloat16 if DEVICE == "cuda" else torch.float32
    print(environment(), flush=True)
    rows = []
    for size, kv in itertools.product(sizes, ("bf16", "fp8")):
        lengths = segment_lengths(size)
        tokens = sum(lengths)
        gen = torch.Generator().manual_seed(tokens)
        q, k, v = (torch.randn(tokens, h, DIM, generator=gen).to(DEVICE, dtype)
                   for h in (Q_HEADS, KV_HEADS, KV_HEADS))  # fmt: skip
        scales = None
        if kv == "fp8":  # FP8 values widened to q's dtype, as KVCache.write_rows keeps them
            amax = [x.float().abs().amax(dim=(0, 2)) for x in (k, v)]  # [KV heads] each
            scales = KvScales.of(amax[0] / 448, amax[1] / 448)
            k, v = (quantize_kv(x, inv).to(dtype) for x, inv in ((k, scales.k_inv),
                                                                 (v, scales.v_inv)))  # fmt: skip
        cu = tuple(itertools.accumulate(lengths, initial=0))
        ref = causal_prefill(q.float(), k.float(), v.float(), cu, DIM**-0.5, scales)
        flops = sum(2.0 * Q_HEADS * DIM * n * n for n in lengths)
        base_us = None
        for (m, n, warps, stages), (split, tma, heavy) in configs:
            block_q = m // gqa_p
            work = prefill_work(cu, block_q, q.device, heavy_first=heavy)

            def call(q=q, k=k, v=v, cu=cu, scales=scales, block_q=block_q, work=work, n=n,
                     warps=warps, stages=stages, split=split, tma=tma):  # fmt: skip
                return ragged_causal_prefill(
                    q, k, v, cu, DIM**-0.5, scales, work=work, block_q=block_q, block_n=n,
                    num_warps=warps, num_stages=stages, split_diagonal=split, tma=tma,
                )  # fmt: skip

            flags = "".join(f for f, on in zip("STH", (split, tma, heavy), strict=True) if on)
            head = [size, kv, m, n, warps, stages, flags or "-"]
            try:
                out = call()
            except Exception as exc:  # out of shared memory etc.: reported, not fatal
                rows.append([*head, "-", "-", "-", f"{type(exc).__name__}: {str(exc)[:60]}"])
                continue
            err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
            ok = "ok" if err < 2e-2 else f"WRONG {err:.1e}"
            if SMOKE:  # the interpreter: the check only
                rows.append([*head, "-", "-", "-", ok])
                continue
            us = triton.testing.do_bench(call, warmup=25, rep=100, return_mode="median") * 1e3
            if base_us is None:
                base_us = us
            rows.append([*head, f"{us:.1f}", f"{flops / us / 1e6:.0f}", f"{base_us / us:.2f}x",
                         ok])  # fmt: skip
            print(rows[-1], flush=True)
    headers = ["tokens", "KV", "M rows", "key block", "warps", "stages", "options", "µs",
               "TFLOP/s", "vs default", "check"]  # fmt: skip
    table = [dict(zip(headers, r, strict=True)) for r in rows]
    write_json("prefill_tiles", {**environment(), "rows": table})
    print("options: S = unmasked tiles before the diagonal, T = tensor descriptors, "
          "H = longest work first")  # fmt: skip
    print(markdown_table(headers, rows))
    best = {}
    for r in rows:
        timed = r[-1] == "ok" and r[7] != "-"
        if timed and ((r[0], r[1]) not in best or float(r[7]) < float(best[r[0], r[1]][7])):
            best[r[0], r[1]] = r
    for key, r in best.items():
        print("best", key, r)


if __name__ == "__main__":
    main()
