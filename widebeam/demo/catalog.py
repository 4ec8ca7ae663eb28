"""The demo catalog: RQ-KMeans SIDs over the latent item embeddings, written as native JSONL."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from widebeam.demo.data import Interactions, item_id, item_title


def write_catalog(path: Path, data: Interactions, codes: np.ndarray) -> None:  # codes [I, L]
    """One line per item: ``item_id``, ``sid``, ``popularity`` (training interactions), and the
    free metadata ``title`` and ``category`` that the gateway returns with recommendations."""
    counts = data.train_counts().tolist()
    with path.open("w", encoding="utf-8") as fh:
        for i, (sid, cat) in enumerate(
            zip(codes.tolist(), data.item_category.tolist(), strict=True)
        ):
            row = {
                "item_id": item_id(i),
                "sid": sid,
                "popularity": counts[i],
                "title": item_title(i, cat),
                "category": cat,
            }
            fh.write(json.dumps(row) + "\n")


def sid_items(codes: np.ndarray) -> dict[tuple[int, ...], list[str]]:  # codes [I, L] int64
    """SID -> its item ids in catalog order (the engine's order for a constrained beam)."""
    out: dict[tuple[int, ...], list[str]] = {}
    for i, sid in enumerate(map(tuple, codes.tolist())):
        out.setdefault(sid, []).append(item_id(i))
    return out


def write_histories(
    path: Path, data: Interactions, users: np.ndarray, max_items: int
) -> None:  # users [U] int64
    """The evaluated users' prompts as item ids, with their held-out item: demo and README
    examples take real histories from here."""
    with path.open("w", encoding="utf-8") as fh:
        for u in users.tolist():
            seq = data.sequences[u]
            history = [item_id(i) for i in seq[:-1][-(max_items - 1) :].tolist()]
            row = {"user_id": f"user-{u:05d}", "history": history, "held_out": item_id(seq[-1])}
            fh.write(json.dumps(row) + "\n")
