"""Plot workload 1 (latency vs output tokens): ours in-engine and through the decoder service,
transformers, and the public general-engine figures.

    python bench/plot_latency.py [--results docs/bench-results] [--out docs/wide_beam_latency.png]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--results", default="docs/bench-results")
    parser.add_argument("--out", default="docs/wide_beam_latency.png")
    args = parser.parse_args()
    results = Path(args.results)
    engine = json.loads((results / "wide_beam.json").read_text())
    rows = engine["rows"]
    tokens = [r["max_new_tokens"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot(tokens, [r["mean_ms"] for r in rows], "o-", label="widebeam engine (mean)")
    e2e_file = results / "wide_beam_e2e.json"
    if e2e_file.exists():
        e2e = json.loads(e2e_file.read_text())["rows"]
        ax.plot(
            [r["max_new_tokens"] for r in e2e],
            [r["mean_ms"] for r in e2e],
            "s--",
            label="widebeam via decoder gRPC (mean)",
        )
    hf = [(r["max_new_tokens"], r["hf_ms"]) for r in rows if r.get("hf_ms")]
    if hf:
        ax.plot(*zip(*hf, strict=True), "^-", label="transformers generate (one request)")
    ax.plot(tokens, [r["public_mean_ms"] for r in rows], "x:", label="public general engine")
    ax.plot(tokens, [r["floor_ms"] for r in rows], "k-", lw=0.8, label="compute floor")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(tokens, [str(t) for t in tokens])
    ax.set_xlabel("max_new_tokens")
    ax.set_ylabel("latency (ms)")
    env = engine["env"]
    ax.set_title(f"Qwen3-0.6B shape, beam = n = 5000 — {env['gpu']}, {env['date']}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
