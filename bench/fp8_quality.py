"""FP8 quality gate (issue 20): the demo's synthetic world (`widebeam.demo`) with a model big
enough for FP8 to matter (default hidden 1024 x 8 layers), trained on the device, then served by
the engine in bf16 and with `quantization="fp8"` to the same held-out users: each one's
recall@10 / NDCG@10, the relative change of recall, and how many of the top-10 / top-50
constrained beams (SIDs) the two share, plus illegal SIDs. The FP8 arm's linears and KV cache
are options: `--kv-dtype fp8` adds the FP8 KV cache, `--quantization none --kv-dtype fp8`
measures the FP8 KV cache alone, `--fp8-accumulation precise` the FP8 GEMMs without fast
accumulation (the serving default is fast). `--head-quantization fp8` serves a third arm, the
FP8 arm with the LM head's GEMM in FP8 too, so both FP8 arms meet the same trained model.

    python bench/fp8_quality.py [--hidden 1024] [--layers 8] [--epochs 8] [--users 1000]
        [--quantization fp8|none] [--kv-dtype auto|fp8] [--fp8-accumulation fast|precise]
        [--head-quantization none|fp8]
    python bench/fp8_quality.py --smoke   # CPU, the demo's tiny world (a check of the script)

Training mirrors `widebeam/demo/train.py` (same batches, loss positions, AdamW and schedule)
with the batches on the device; the demo's own build stays CPU-only.
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from harness import DEVICE, environment, markdown_table, write_json
from tokenizers import Tokenizer

from widebeam.demo.catalog import write_catalog
from widebeam.demo.config import DemoConfig, EvalConfig, ModelConfig, TrainConfig, tiny_config
from widebeam.demo.data import generate, item_id
from widebeam.demo.evaluate import rank_metrics
from widebeam.demo.model import PaddedCausalAttention, init_model_dir, save_model
from widebeam.demo.train import _loss_pattern, _lr_factor, batches, item_token_table
from widebeam.services.catalog.sid_layout import SidLayout
from widebeam.services.catalog.sids import build_sids
from widebeam.services.decoder.config import EngineConfig
from widebeam.services.decoder.engine import Engine
from widebeam.services.decoder.model.transformer import CausalLM
from widebeam.services.decoder.requests.results import RequestOutput
from widebeam.services.decoder.requests.spec import GenerationRequest
from widebeam.services.decoder.server.prompting import history_prompt

TOP_N = (10, 50)


def train_on_device(
    model: CausalLM, sequences: Sequence[np.ndarray], item_tokens: np.ndarray,
    layout: SidLayout, cfg: TrainConfig, pad_id: int,
) -> list[float]:  # fmt: skip
    """The demo's training loop with every batch moved to the model's device; loss per epoch."""
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    pattern = _loss_pattern(layout)
    total = -(-len(sequences) // cfg.batch_size) * cfg.epochs
    decay = [p for p in model.parameters() if p.dim() >= 2]
    keep = [p for p in model.parameters() if p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": cfg.weight_decay},
        {"params": keep, "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.98))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: _lr_factor(s, cfg.warmup_steps, total))
    device = model.device
    losses = []
    for _ in range(cfg.epochs):
        loss_sum, count = torch.zeros((), device=device), 0
        for tokens, mask, labels in batches(sequences, item_tokens, pattern, cfg, rng, pad_id):
            tokens, mask, labels = tokens.to(device), mask.to(device), labels.to(device)
            b, t = tokens.shape
            positions = torch.arange(t, device=device).repeat(b)
            hidden = model(tokens.reshape(-1), positions, PaddedCausalAttention(b, t))
            loss = F.cross_entropy(model.compute_logits(hidden[mask.reshape(-1)]), labels)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            opt.step()
            sched.step()
            loss_sum += loss.detach() * len(labels)
            count += len(labels)
        losses.append(float(loss_sum) / max(count, 1))
        print(f"epoch {len(losses)}: loss {losses[-1]:.3f}", flush=True)
    return losses


def serve(
    model_dir: Path, catalog: Path, prompts: list[list[int]], steps: int, width: int,
    quantization: str, kv_dtype: str, fp8_accumulation: str = "fast",
    head_quantization: str = "none", kv_fp8_queries: bool = False,
    kv_fp8_probabilities: bool = False,
) -> tuple[list[RequestOutput], float]:  # fmt: skip
    """Every user's constrained beam request (n = width) through one engine; wall seconds."""
    dtype = "bfloat16" if DEVICE == "cuda" else "float32"
    config = EngineConfig(
        model_dir=str(model_dir),
        catalog_path=str(catalog),
        device=DEVICE,
        dtype=dtype,
        quantization=quantization,
        fp8_accumulation=fp8_accumulation,
        head_quantization=head_quantization,
        kv_dtype=kv_dtype,
        kv_fp8_queries=kv_fp8_queries,
        kv_fp8_probabilities=kv_fp8_probabilities,
        max_rows=max(1024, 16 * width),
    )
    engine = Engine(config)
    requests = [
        GenerationRequest(
            f"user-{i}", tuple(p), beam_width=width, n=width, max_new_tokens=steps,
            eos_token_id=(), constrained=True,
        )
        for i, p in enumerate(prompts)
    ]  # fmt: skip
    start = time.perf_counter()
    outputs = engine.generate(requests)
    seconds = time.perf_counter() - start
    failed = [o.error for o in outputs if o.error]
    if failed:
        raise RuntimeError(f"{len(failed)} requests failed, e.g. {failed[0]}")
    return outputs, seconds


def arm_name(row: dict[str, object]) -> str:
    """A further arm's name: what it adds to the FP8 arm."""
    added = [
        label
        for key, label in (
            ("kv_fp8_queries", "the attention's queries"),
            ("kv_fp8_probabilities", "its probabilities"),
        )
        if row[key]
    ]
    return " and ".join(added) + " in FP8" if added else "the LM head in FP8"


def ranked_items(out: RequestOutput) -> list[str]:
    items: list[str] = []
    for beam in out.beams:
        items += [i for i in beam.item_ids or () if i not in items]
    return items


def overlap(a: RequestOutput, b: RequestOutput, n: int) -> int:
    """How many of the top-n beams (SIDs) two answers share."""
    return len(
        {tuple(x.output_ids) for x in a.beams[:n]} & {tuple(x.output_ids) for x in b.beams[:n]}
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--users", type=int, default=1000, help="held-out users served")
    parser.add_argument("--width", type=int, default=max(TOP_N), help="beam width = n")
    parser.add_argument("--smoke", action="store_true", help="CPU, the demo's tiny world")
    parser.add_argument(
        "--quantization", default="fp8", choices=["fp8", "none"], help="the FP8 arm's linears"
    )
    parser.add_argument(
        "--kv-dtype", default="auto", choices=["auto", "fp8"], help="the FP8 arm's KV cache"
    )
    parser.add_argument(
        "--fp8-accumulation", default="fast", choices=["fast", "precise"],
        help="the FP8 arm's GEMM sums on CUDA",
    )  # fmt: skip
    parser.add_argument(
        "--head-quantization", default="none", choices=["none", "fp8"],
        help="fp8: a further arm, the FP8 arm with its LM head in FP8 (needs --quantization fp8)",
    )  # fmt: skip
    parser.add_argument(
        "--kv-fp8-queries", action="store_true",
        help="a further arm, the FP8 arm with decode's scores over the prompt from queries "
        "rounded to FP8 (needs --kv-dtype fp8)",
    )  # fmt: skip
    parser.add_argument(
        "--kv-fp8-probabilities", action="store_true",
        help="a further arm, the FP8 arm with attention's probabilities over the prompt rounded "
        "to FP8, P V on FP8 tensor cores (with --kv-fp8-queries: both; needs --kv-dtype fp8)",
    )  # fmt: skip
    args = parser.parse_args()
    for flag in ("kv_fp8_queries", "kv_fp8_probabilities"):
        if getattr(args, flag) and args.kv_dtype != "fp8":
            parser.error(f"--{flag.replace('_', '-')} needs --kv-dtype fp8")
    if args.smoke:
        cfg = tiny_config()
        width = 16
    else:
        heads = args.hidden // 128
        cfg = DemoConfig(
            model=ModelConfig(
                hidden_size=args.hidden, intermediate_size=3 * args.hidden,
                num_layers=args.layers, num_heads=heads, num_kv_heads=max(1, heads // 2),
                head_dim=128,
            ),
            train=dataclasses.replace(TrainConfig(), epochs=args.epochs, lr=1e-3),
            eval=EvalConfig(num_users=args.users),
        )  # fmt: skip
        width = args.width
    root = Path(tempfile.mkdtemp(prefix="fp8-quality-"))
    data = generate(cfg.data)
    sids = build_sids(data.item_embeddings, cfg.codebook_sizes, seed=cfg.data.seed)
    catalog = root / "catalog.jsonl"
    write_catalog(catalog, data, sids.codes)
    model_dir = root / "model"
    model = init_model_dir(model_dir, cfg.model, cfg.codebook_sizes, seed=cfg.train.seed)
    model = model.to(DEVICE)
    layout = SidLayout.from_tokenizer(model_dir)
    assert layout is not None
    pad = Tokenizer.from_file(str(model_dir / "tokenizer.json")).token_to_id("<|endoftext|>")
    if DEVICE == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    start = time.perf_counter()
    losses = train_on_device(
        model, data.train_sequences(), item_token_table(layout, sids.codes), layout, cfg.train, pad
    )
    train_s = time.perf_counter() - start
    model.eval().requires_grad_(False)
    save_model(model.cpu(), model_dir)
    del model

    # the last `--users` users (their held-out items are never trained on)
    users = np.arange(len(data.sequences))[-cfg.eval.num_users :]
    codes = sids.codes.tolist()
    history = cfg.train.max_items - 1
    prompts = [
        history_prompt(layout, [codes[i] for i in data.sequences[u][:-1][-history:]])
        for u in users.tolist()
    ]
    targets = [item_id(int(i)) for i in data.held_out()[users]]
    steps = layout.path_length(include_begin=False)
    # (linears, KV cache, LM head, FP8 queries, FP8 probabilities): bf16, the FP8 arm, then its
    # further arms
    linears, kv = args.quantization, args.kv_dtype
    arms = [("none", "auto", "none", False, False), (linears, kv, "none", False, False)]
    if args.head_quantization != "none":
        arms.append((linears, kv, args.head_quantization, False, False))
    if args.kv_fp8_queries:
        arms.append((linears, kv, "none", True, False))
    if args.kv_fp8_probabilities:
        arms.append((linears, kv, "none", args.kv_fp8_queries, True))
    answers, rows = [], []
    for quantization, kv_dtype, head, fp8_queries, fp8_probabilities in arms:
        outputs, seconds = serve(
            model_dir, catalog, prompts, steps, width, quantization, kv_dtype,
            args.fp8_accumulation, head, fp8_queries, fp8_probabilities,
        )  # fmt: skip
        recall, ndcg = rank_metrics([ranked_items(o) for o in outputs], targets, 10)
        illegal = sum(not b.item_ids for o in outputs for b in o.beams)
        row = {"quantization": quantization, "kv_dtype": kv_dtype, "head_quantization": head,
               "kv_fp8_queries": fp8_queries, "kv_fp8_probabilities": fp8_probabilities,
               "recall@10": recall, "ndcg@10": ndcg,
               "illegal_sids": illegal, "serve_s": seconds}  # fmt: skip
        if answers:  # against the bf16 arm
            base = rows[0]["recall@10"]
            row["recall_relative_change"] = (recall - base) / max(base, 1e-9)
            pairs = list(zip(answers[0], outputs, strict=True))
            for n in TOP_N:
                row[f"top{n}_overlap"] = float(np.mean([overlap(a, b, n) for a, b in pairs]))
        answers.append(outputs)
        rows.append(row)
    fp8 = rows[1]  # the linears' arm, as before the head arm existed
    change = fp8["recall_relative_change"]
    overlaps = {f"top{n}_overlap": fp8[f"top{n}_overlap"] for n in TOP_N}
    env = environment() | {
        "smoke": args.smoke, "users": len(users), "width": width,
        "fp8_accumulation": args.fp8_accumulation,
    }  # fmt: skip
    result = {"env": env, "config": cfg.to_dict(), "train_s": train_s, "epoch_loss": losses,
              "rows": rows, "recall_relative_change": change, **overlaps}  # fmt: skip
    arm = (args.quantization, args.kv_dtype)
    name = "fp8_quality" + ("" if arm == ("fp8", "auto") else "_{}_kv_{}".format(*arm))
    write_json(name + ("" if args.fp8_accumulation == "fast" else "_precise"), result)
    shape = f"hidden {cfg.model.hidden_size} x {cfg.model.num_layers} layers"
    print(f"\nFP8 quality ({shape}, {len(users)} users, width {width}, trained {train_s:.0f} s)")
    print(env)
    headers = ["linears", "KV cache", "LM head", "FP8 queries", "FP8 probabilities",
               "recall@10", "NDCG@10", "illegal SIDs", "serve s"]  # fmt: skip
    keys = ["quantization", "kv_dtype", "head_quantization", "kv_fp8_queries",
            "kv_fp8_probabilities", "recall@10", "ndcg@10", "illegal_sids", "serve_s"]  # fmt: skip
    # metrics as 4-decimal strings: the table's own float format keeps one decimal
    cell = lambda k, v: f"{v:.4f}" if k in ("recall@10", "ndcg@10") else v  # noqa: E731
    print(markdown_table(headers, [[cell(k, r[k]) for k in keys] for r in rows]))
    shared = [f"top-{n} overlap {overlaps[f'top{n}_overlap']:.2f}/{min(n, width)}" for n in TOP_N]
    print(f"recall@10 relative change {100 * change:+.2f}%; " + "; ".join(shared))
    for row in rows[2:]:
        shared = [f"top-{n} overlap {row[f'top{n}_overlap']:.2f}/{min(n, width)}" for n in TOP_N]
        change = 100 * row["recall_relative_change"]
        arm = arm_name(row)
        print(f"with {arm}: recall@10 relative change {change:+.2f}%; " + "; ".join(shared))


if __name__ == "__main__":
    main()
