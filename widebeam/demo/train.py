"""Next-item training on the serving prompt format, teacher-forced, on CPU.

A user's training sequence is written exactly as the decoder's Recommend RPC writes a history
(:func:`~widebeam.services.decoder.server.prompting.sid_to_tokens` per item: ``begin codes end``),
so the prefix before item t's codes *is* ``history_prompt(items[:t])``. One forward therefore
trains every item of the window as a next-item target: the loss covers each item's code tokens
and its end token (predicted from ``begin``, ``code_0``, ..), never the ``begin`` after ``end``
(that one is fixed by the format, not a prediction).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from widebeam.demo.config import TrainConfig
from widebeam.demo.model import sequence_logits
from widebeam.demo.progress import progress_bar
from widebeam.services.catalog.sid_layout import SidLayout
from widebeam.services.decoder.model.transformer import CausalLM
from widebeam.services.decoder.server.prompting import sid_to_tokens


@dataclass(frozen=True)
class TrainResult:
    steps: int
    seconds: float
    epoch_loss: tuple[float, ...]  # mean loss per target token, per epoch


def item_token_table(layout: SidLayout, codes: np.ndarray) -> np.ndarray:
    """codes [I, L] -> [I, P] int64: the prompt tokens of every item (P = path length)."""
    return np.array([sid_to_tokens(layout, row) for row in codes.tolist()], dtype=np.int64)


def _loss_pattern(layout: SidLayout) -> np.ndarray:  # [P] bool: does token p predict a target?
    path = layout.path_length(include_begin=True)
    pattern = np.ones(path, dtype=bool)
    if layout.end_token_id is not None:
        pattern[-1] = False  # `end` is followed by the next item's `begin`: no prediction
    return pattern


def batches(
    sequences: Sequence[np.ndarray],  # per user: [n_u] int64 item indices
    item_tokens: np.ndarray,  # [I, P] int64
    pattern: np.ndarray,  # [P] bool
    cfg: TrainConfig,
    rng: np.random.Generator,
    pad_id: int,
) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """One epoch of (tokens [B, T] int64, loss mask [B, T] bool, labels [M] int64) batches.

    Long sequences contribute a random window of ``max_items`` items; windows of similar length
    share a batch (little padding); batch order is shuffled.
    """
    windows = []
    for seq in sequences:
        start = (
            int(rng.integers(0, len(seq) - cfg.max_items + 1)) if len(seq) > cfg.max_items else 0
        )
        windows.append(seq[start : start + cfg.max_items])
    order = np.lexsort((rng.random(len(windows)), [len(w) for w in windows]))
    chunks = [order[i : i + cfg.batch_size] for i in range(0, len(order), cfg.batch_size)]
    for chunk in (chunks[i] for i in rng.permutation(len(chunks))):
        rows = [item_tokens[windows[u]].reshape(-1) for u in chunk]
        masks = [np.tile(pattern, len(windows[u])) for u in chunk]
        width = max(len(r) for r in rows)
        tokens = np.full((len(rows), width), pad_id, dtype=np.int64)  # [B, T]
        mask = np.zeros((len(rows), width), dtype=bool)  # [B, T]
        for i, (r, m) in enumerate(zip(rows, masks, strict=True)):
            tokens[i, : len(r)] = r
            mask[i, : len(m)] = m
        # The label of position p is token p+1; the pattern never marks a row's last token.
        labels = np.concatenate([tokens[:, 1:], tokens[:, :1]], axis=1)[mask]  # [M]
        yield torch.from_numpy(tokens), torch.from_numpy(mask), torch.from_numpy(labels)


def train(
    model: CausalLM,
    sequences: Sequence[np.ndarray],  # per user: [n_u] int64 item indices (held-out removed)
    item_tokens: np.ndarray,  # [I, P] int64
    layout: SidLayout,
    cfg: TrainConfig,
    pad_id: int,
    progress: bool = True,
) -> TrainResult:
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    pattern = _loss_pattern(layout)
    per_epoch = math.ceil(len(sequences) / cfg.batch_size)
    total = per_epoch * cfg.epochs
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]  # matrices, not norms
    keep = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": cfg.weight_decay},
            {"params": keep, "weight_decay": 0.0},
        ],
        lr=cfg.lr,
        betas=(0.9, 0.98),
    )
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: _lr_factor(s, cfg.warmup_steps, total))
    model.train()
    start, step, epoch_loss = time.perf_counter(), 0, []
    bar = progress_bar("training", "step", progress, total)
    for _ in range(cfg.epochs):
        loss_sum, count = 0.0, 0
        for tokens, mask, labels in batches(sequences, item_tokens, pattern, cfg, rng, pad_id):
            logits = sequence_logits(model, tokens, mask)  # [M, vocab]
            loss = F.cross_entropy(logits, labels)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            opt.step()
            sched.step()
            step += 1
            loss_sum += loss.item() * len(labels)
            count += len(labels)
            bar.update(1)
            bar.set_postfix(loss=f"{loss.item():.3f}", refresh=False)
        epoch_loss.append(loss_sum / max(count, 1))
    bar.close()
    model.eval().requires_grad_(False)
    return TrainResult(step, time.perf_counter() - start, tuple(epoch_loss))


def _lr_factor(step: int, warmup: int, total: int) -> float:
    """Linear warm-up, then cosine decay to 10% of the peak."""
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress))
