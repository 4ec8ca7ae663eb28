"""Synthetic SID catalogs for the constrained workloads (written once per machine)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from cache_dir import bench_cache


def random_catalog(num_sids: int, levels: tuple[int, ...], seed: int = 0) -> Path:
    """A JSONL catalog of `num_sids` distinct random SIDs, one item each."""
    root = bench_cache()
    path = root / f"catalog-{num_sids}-{'x'.join(map(str, levels))}-{seed}.jsonl"
    if path.exists():
        return path
    rng = np.random.default_rng(seed)
    space = int(np.prod(levels))
    packed = rng.choice(space, size=num_sids, replace=False)
    codes = np.stack(np.unravel_index(packed, levels), axis=1)
    root.mkdir(parents=True, exist_ok=True)
    with path.open("w") as fh:
        for i, sid in enumerate(codes.tolist()):
            fh.write(json.dumps({"item_id": f"i{i}", "sid": sid}) + "\n")
    return path


def dict_trie(path: Path, bases: list[int], end: int | None) -> dict:
    """The catalog as a dict-of-dicts over token ids, for prefix_allowed_tokens_fn."""
    root: dict = {}
    with path.open() as fh:
        for line in fh:
            node = root
            for level, code in enumerate(json.loads(line)["sid"]):
                node = node.setdefault(bases[level] + code, {})
            if end is not None:
                node.setdefault(end, {})
    return root


def prefix_fn(trie: dict, prompt_len: int, fallback: list[int]):
    def allowed(batch_id: int, input_ids) -> list[int]:
        node = trie
        for token in input_ids[prompt_len:].tolist():
            node = node.get(token, {})
        return list(node) or fallback

    return allowed
