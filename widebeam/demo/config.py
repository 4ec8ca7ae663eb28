"""Every knob of the demo recommender in one frozen dataclass; its hash keys the artifact cache."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class DataConfig:
    """The synthetic world (see :mod:`widebeam.demo.data`)."""

    num_items: int = 3000
    num_categories: int = 24
    dim: int = 32
    num_users: int = 4000
    min_len: int = 8  # interactions per user, held-out item included
    max_len: int = 24
    item_spread: float = 0.55  # item noise around its category centre (centres ~unit normal)
    zipf: float = 0.9  # popularity of the r-th most popular item ∝ r^-zipf
    stay: float = 0.75  # chance the next item is a neighbour of the previous one
    neighbours: int = 24  # candidate neighbours of an item
    temperature: float = 0.5  # softmax temperature over neighbour distances² (scaled)
    popularity_bias: float = 0.3  # neighbour choice ∝ softmax(-d²/T) · popularity^bias
    taste_concentration: float = 0.3  # Dirichlet α of a user's taste over categories
    drift: float = 0.08  # taste moves this far towards fresh noise per interaction
    seed: int = 0


@dataclass(frozen=True)
class ModelConfig:
    hidden_size: int = 128
    intermediate_size: int = 384
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 32
    base_vocab: int = 16  # plain <t_i> tokens: unused by recommendations, kept for completions


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = 8
    batch_size: int = 64  # sequences per step
    max_items: int = 20  # history items in a training window / an evaluation prompt
    lr: float = 3e-3
    weight_decay: float = 0.01
    warmup_steps: int = 30
    grad_clip: float = 1.0
    seed: int = 0


@dataclass(frozen=True)
class EvalConfig:
    num_users: int = 1000  # held-out users evaluated (0: all)
    beam_width: int = 32
    k: int = 10
    max_rows: int = 1024  # the engine's rows at once: 32 requests of width 32


@dataclass(frozen=True)
class DemoConfig:
    data: DataConfig = field(default_factory=DataConfig)
    codebook_sizes: tuple[int, ...] = (32, 32, 32)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    # torch threads for training and evaluation. One: with two on a 2-core machine that other
    # work also uses, every small op waits for whichever thread was descheduled (many times
    # slower than one thread); and the count changes float sums, so a fixed one keeps a seed's
    # results the same on a machine.
    threads: int = 1

    def to_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)

    def fingerprint(self) -> str:
        """Hash of the config and of the code that turns it into artifacts."""
        digest = hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode())
        for file in sorted(_code_files()):
            digest.update(file.name.encode() + file.read_bytes())
        return digest.hexdigest()[:16]


def tiny_config() -> DemoConfig:
    """A seconds-long end-to-end run for tests: few users and items, one epoch."""
    return DemoConfig(
        data=DataConfig(num_items=200, num_categories=6, num_users=150, min_len=4, max_len=8),
        codebook_sizes=(8, 8, 8),
        model=ModelConfig(hidden_size=32, intermediate_size=64, num_heads=2, head_dim=16),
        train=TrainConfig(epochs=1, batch_size=32, warmup_steps=2),
        eval=EvalConfig(num_users=40, beam_width=16),
    )


def _code_files() -> list[Path]:
    """The demo's own sources and the SID builder: editing either invalidates the cache."""
    from widebeam.services.catalog import sids

    here = Path(__file__).resolve().parent
    files = [*here.glob("*.py"), *Path(sids.__file__).resolve().parent.glob("*.py")]
    # Command-line front ends do not change what gets built.
    return [f for f in files if f.name not in ("cli.py", "__main__.py", "io.py")]
