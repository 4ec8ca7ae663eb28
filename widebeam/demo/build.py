"""`widebeam demo build`: synthetic data -> SIDs -> catalog -> tiny Qwen3 -> training -> eval.

Artifacts under ``--out`` (default ``.cache/demo``): ``model/`` (HF format: config.json,
generation_config.json, model.safetensors, tokenizer.json), ``catalog.jsonl``, ``eval.json`` (the
quality table and build facts), ``histories.jsonl`` (evaluated users). ``stamp.json`` holds the
fingerprint of the config and of the demo/SID code; a matching stamp means nothing is rebuilt.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer

from widebeam.demo.catalog import sid_items, write_catalog, write_histories
from widebeam.demo.config import DemoConfig
from widebeam.demo.data import generate, item_id
from widebeam.demo.evaluate import evaluate
from widebeam.demo.model import init_model_dir, save_model
from widebeam.demo.train import item_token_table, train
from widebeam.services.catalog.sid_layout import SidLayout
from widebeam.services.catalog.sids import build_sids
from widebeam.services.decoder.server.prompting import history_prompt

DEFAULT_OUT = Path(".cache/demo")
_FILES = ("model/config.json", "model/model.safetensors", "catalog.jsonl", "eval.json")


@dataclass(frozen=True)
class DemoArtifacts:
    root: Path
    model_dir: Path
    catalog: Path
    eval_json: Path
    histories: Path
    rebuilt: bool

    @classmethod
    def at(cls, root: Path, rebuilt: bool) -> DemoArtifacts:
        return cls(root, root / "model", root / "catalog.jsonl", root / "eval.json",
                   root / "histories.jsonl", rebuilt)  # fmt: skip

    def eval_table(self) -> str:
        return str(json.loads(self.eval_json.read_text())["table"])


def build_demo(
    out: str | Path = DEFAULT_OUT,
    cfg: DemoConfig | None = None,
    *,
    force: bool = False,
    progress: bool = True,
) -> DemoArtifacts:
    """Build (or reuse) the demo artifacts under ``out``; progress bars and a line per step
    (with its seconds) go to stderr."""
    cfg = cfg or DemoConfig()
    root = Path(out).resolve()
    cached = None if force else cached_artifacts(root, cfg)
    if cached is not None:
        return cached
    root.mkdir(parents=True, exist_ok=True)
    (root / "stamp.json").unlink(missing_ok=True)  # a build that dies half-way is no cache
    art = DemoArtifacts.at(root, rebuilt=True)
    with _torch_threads(cfg.threads):
        facts = _build(art, cfg, progress)
    art.eval_json.write_text(json.dumps(facts, indent=2) + "\n")
    (root / "stamp.json").write_text(json.dumps({"fingerprint": cfg.fingerprint()}) + "\n")
    return art


def _build(art: DemoArtifacts, cfg: DemoConfig, progress: bool) -> dict[str, object]:
    """Every step; returns eval.json's facts."""
    clock = _StepClock()
    data = generate(cfg.data, progress)
    _log(f"data: {data.num_items} items, {len(data.sequences)} users ({clock.lap('data')} s)")
    sids = build_sids(data.item_embeddings, cfg.codebook_sizes, seed=cfg.data.seed)
    write_catalog(art.catalog, data, sids.codes)
    _log(f"SIDs: {sids.stats.summary()}; catalog written ({clock.lap('sids_catalog')} s)")

    staging = art.root / "model.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    model = init_model_dir(staging, cfg.model, cfg.codebook_sizes, seed=cfg.train.seed)
    layout = SidLayout.from_tokenizer(staging)
    assert layout is not None  # the tokenizer was just written with SID tokens
    pad = Tokenizer.from_file(str(staging / "tokenizer.json")).token_to_id("<|endoftext|>")
    tokens = item_token_table(layout, sids.codes)  # [I, P]
    fit = train(model, data.train_sequences(), tokens, layout, cfg.train, pad, progress)
    save_model(model, staging, {"fingerprint": cfg.fingerprint(), "config": cfg.to_dict()})
    shutil.rmtree(art.model_dir, ignore_errors=True)
    staging.rename(art.model_dir)
    _log(f"trained {fit.steps} steps ({clock.lap('train')} s); loss per epoch "
         + ", ".join(f"{x:.3f}" for x in fit.epoch_loss))  # fmt: skip

    users = _eval_users(len(data.sequences), cfg.eval.num_users, cfg.data.seed)
    max_history = cfg.train.max_items - 1
    codes = sids.codes.tolist()
    prompts = [
        history_prompt(layout, [codes[i] for i in data.sequences[u][:-1][-max_history:]])
        for u in users.tolist()
    ]
    targets = [item_id(int(i)) for i in data.held_out()[users]]
    popular = [item_id(int(i)) for i in np.argsort(-data.train_counts(), kind="stable")]
    report = evaluate(str(art.model_dir), str(art.catalog), layout, sid_items(art.catalog),
                      prompts, targets, popular[: cfg.eval.k], cfg.eval, progress)  # fmt: skip
    write_histories(art.histories, data, users, cfg.train.max_items)
    _log(f"evaluated {len(users)} held-out users x 2 beam methods (width "
         f"{cfg.eval.beam_width}) through the engine ({clock.lap('eval')} s)")  # fmt: skip
    return {
        "table": report.table(),
        "eval": report.to_dict(),
        "sids": asdict(sids.stats),
        "train": asdict(fit),
        "build_seconds": clock.total(),
        "step_seconds": clock.seconds,
        "config": cfg.to_dict(),
    }


class _StepClock:
    """Wall seconds of each build step, rounded to 0.1 s."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._start = self._last = time.perf_counter()

    def lap(self, step: str) -> float:
        """Seconds since the previous lap (or the start), recorded as `step`'s."""
        now = time.perf_counter()
        self.seconds[step] = round(now - self._last, 1)
        self._last = now
        return self.seconds[step]

    def total(self) -> float:
        return round(time.perf_counter() - self._start, 1)


@contextmanager
def _torch_threads(count: int) -> Iterator[None]:
    """torch's intra-op thread count set for the block (it is process-wide), then restored."""
    previous = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def cached_artifacts(out: str | Path, cfg: DemoConfig) -> DemoArtifacts | None:
    """The artifacts under ``out`` if they were built from ``cfg`` by this code, else None."""
    root = Path(out).resolve()
    try:
        stamp = json.loads((root / "stamp.json").read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(stamp, dict) and stamp.get("fingerprint") == cfg.fingerprint()
    return (
        DemoArtifacts.at(root, rebuilt=False)
        if ok and all((root / f).is_file() for f in _FILES)
        else None
    )


def _eval_users(total: int, wanted: int, seed: int) -> np.ndarray:  # [U] int64, sorted
    if wanted <= 0 or wanted >= total:
        return np.arange(total, dtype=np.int64)
    return np.sort(np.random.default_rng(seed + 1).choice(total, wanted, replace=False))


def _log(message: str) -> None:
    print(f"demo: {message}", file=sys.stderr, flush=True)
