"""Tile sweep of the ragged causal prefill kernel
(`widebeam/kernels/attention/triton_prefill.py`) at
Qwen3-1.7B's heads (16 query / 8 KV heads of 128), one prompt of 1,000 and of 5,000 tokens,
bf16 K/V and FP8 K/V: for each (query block, key block, warps, stages), the median µs of one
call (`triton.testing.do_bench`), TFLOP/s over the causal half, and the error against the
fp32 torch reference (a configuration that is wrong is reported, never timed as a winner).

    python bench/prefill_tiles.py [--tokens 1000,5000] [--smoke]
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", default="1000,5000")
    parser.add_argument("--smoke", action="store_true", help="CPU: two configurations, 64 tokens")
    args = parser.parse_args()
    import triton.testing

    sizes = [64] if args.smoke else [int(t) for t in args.tokens.split(",")]
    gqa_p = gqa_padded(Q_HEADS, KV_HEADS)
    default = (prefill_block_q(Q_HEADS, KV_HEADS) * gqa_p, 64, 4, 3)
    sweep = itertools.product((64, 128), (32, 64, 128), (4, 8), (2, 3, 4))
    configs = [default, *(() if args.smoke else (c for c in sweep if c != default))]
    dtype = torch.bfloat16 if DEVICE == "cuda" else torch.float32
    print(environment(), flush=True)
    rows = []
    for tokens, kv in itertools.product(sizes, ("bf16", "fp8")):
        gen = torch.Generator().manual_seed(tokens)
        q, k, v = (torch.randn(tokens, h, DIM, generator=gen).to(DEVICE, dtype)
                   for h in (Q_HEADS, KV_HEADS, KV_HEADS))  # fmt: skip
        scales = None
        if kv == "fp8":
            amax = [x.float().abs().amax(dim=(0, 2)) for x in (k, v)]  # [KV heads] each
            scales = KvScales.of(amax[0] / 448, amax[1] / 448)
            k, v = quantize_kv(k, scales.k_inv), quantize_kv(v, scales.v_inv)
        cu = (0, tokens)
        ref = causal_prefill(q.float(), k, v, cu, DIM**-0.5, scales)
        flops = 2.0 * Q_HEADS * DIM * tokens * tokens
        base_us = None
        for m, n, warps, stages in configs:
            block_q = m // gqa_p
            work = prefill_work(cu, block_q, q.device)

            def call(q=q, k=k, v=v, cu=cu, scales=scales, block_q=block_q, work=work, n=n,
                     warps=warps, stages=stages):  # fmt: skip
                return ragged_causal_prefill(
                    q, k, v, cu, DIM**-0.5, scales, work=work, block_q=block_q, block_n=n,
                    num_warps=warps, num_stages=stages,
                )  # fmt: skip

            try:
                out = call()
            except Exception as exc:  # out of shared memory etc.: reported, not fatal
                why = f"{type(exc).__name__}: {str(exc)[:60]}"
                rows.append([tokens, kv, m, n, warps, stages, "-", "-", "-", why])
                continue
            err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
            ok = "ok" if err < 2e-2 else f"WRONG {err:.1e}"
            if SMOKE:  # the interpreter: the check only
                rows.append([tokens, kv, m, n, warps, stages, "-", "-", "-", ok])
                continue
            us = triton.testing.do_bench(call, warmup=25, rep=100, return_mode="median") * 1e3
            if base_us is None:
                base_us = us
            rows.append([tokens, kv, m, n, warps, stages, f"{us:.1f}",
                         f"{flops / us / 1e6:.0f}", f"{base_us / us:.2f}x", ok])  # fmt: skip
            print(rows[-1], flush=True)
    headers = ["tokens", "KV", "M rows", "key block", "warps", "stages", "µs", "TFLOP/s",
               "vs default", "check"]  # fmt: skip
    table = [dict(zip(headers, r, strict=True)) for r in rows]
    write_json("prefill_tiles", {**environment(), "rows": table})
    print(markdown_table(headers, rows))
    best = {}
    for r in rows:
        if r[-1] == "ok" and ((r[0], r[1]) not in best or float(r[6]) < float(best[r[0], r[1]][6])):
            best[r[0], r[1]] = r
    for key, r in best.items():
        print("best", key, r)


if __name__ == "__main__":
    main()
