"""The demo catalog: RQ-KMeans SIDs over the latent item embeddings, written as native JSONL."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from widebeam.demo.data import Interactions, item_id, item_title
from widebeam.services.catalog.formats import load_catalog


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


def sid_items(path: Path) -> dict[tuple[int, ...], list[str]]:
    """SID -> its item ids in the order the engine names them for a constrained beam: the
    written catalog read back through the catalog pipeline (most popular first)."""
    return load_catalog(path).items_by_popularity()


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
