"""A seeded synthetic interaction log with learnable structure.

The world:
- **Items** belong to categories. A category is a Gaussian centre in ``dim`` dimensions; an item's
  latent embedding is its centre plus isotropic noise (``item_spread``). Category sizes vary
  (Dirichlet), and item popularity is Zipf-like over a random order of the items.
- **Users** have a taste: a sparse distribution over categories (Dirichlet, ``taste_concentration``
  small, so a few favourite categories).
- **Sessions** are a Markov-ish walk. The first item comes from a category drawn from the taste,
  by popularity within it. Then, with probability ``stay``, the next item is one of the previous
  item's ``neighbours`` nearest items (softmax of -distance²/temperature, times popularity^bias);
  otherwise the user jumps to a category drawn from the *current* taste, again by popularity.
  After every interaction the taste drifts a little towards fresh Dirichlet noise, so recent
  items say more about the next one than old ones.

Next-item prediction is therefore learnable from the history (neighbourhood of the last item,
favourite categories, recency) and beats popularity. The held-out item of a user is the last
item of their sequence; everything before it is training data.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from widebeam.demo.config import DataConfig
from widebeam.demo.progress import progress_bar


@dataclass(frozen=True)
class Interactions:
    item_embeddings: np.ndarray  # [I, D] float32, latent (what SIDs are built from)
    item_category: np.ndarray  # [I] int64
    item_weight: np.ndarray  # [I] float64, the true (Zipf) popularity, sums to 1
    sequences: list[np.ndarray]  # per user: [len_u] int64 item indices, oldest first

    @property
    def num_items(self) -> int:
        return int(self.item_embeddings.shape[0])

    def train_sequences(self) -> list[np.ndarray]:
        """Each user's sequence without the held-out last item."""
        return [s[:-1] for s in self.sequences]

    def held_out(self) -> np.ndarray:  # [U] int64: each user's last item
        return np.array([s[-1] for s in self.sequences], dtype=np.int64)

    def train_counts(self) -> np.ndarray:  # [I] int64: interactions per item, held-out excluded
        return np.bincount(np.concatenate(self.train_sequences()), minlength=self.num_items)


def item_id(index: int) -> str:
    return f"item-{index:04d}"


def item_title(index: int, category: int) -> str:
    return f"Item {index:04d} (category {category})"


def generate(cfg: DataConfig, progress: bool = False) -> Interactions:
    """The seeded world of ``cfg`` (a progress bar over users on stderr with ``progress``)."""
    if not 2 <= cfg.min_len <= cfg.max_len:
        raise ValueError(f"need 2 <= min_len <= max_len, got {cfg.min_len}, {cfg.max_len}")
    if cfg.neighbours >= cfg.num_items:
        raise ValueError(f"neighbours ({cfg.neighbours}) must be < num_items ({cfg.num_items})")
    rng = np.random.default_rng(cfg.seed)
    cats = cfg.num_categories
    centres = rng.normal(size=(cats, cfg.dim)).astype(np.float32)  # [C, D]
    category = rng.choice(cats, size=cfg.num_items, p=rng.dirichlet(np.full(cats, 3.0)))
    noise = rng.normal(scale=cfg.item_spread, size=(cfg.num_items, cfg.dim))
    emb = (centres[category] + noise).astype(np.float32)  # [I, D]
    rank = rng.permutation(cfg.num_items) + 1
    weight = rank.astype(np.float64) ** -cfg.zipf
    weight /= weight.sum()  # [I]
    nbr, nbr_p = _neighbour_table(emb, weight, cfg)
    members = [np.flatnonzero(category == c) for c in range(cats)]
    # Inverse-CDF sampling on cumulative tables: rng.choice(p=...) per draw is ~10× slower.
    nbr_cdf = np.cumsum(nbr_p, axis=1)  # [I, M]
    in_cat_cdf = [np.cumsum(weight[m]) / weight[m].sum() for m in members]
    alive = np.array([len(m) > 0 for m in members], dtype=np.float64)  # [C]: empty never drawn
    sequences = []
    users = progress_bar("data", "user", progress, items=range(cfg.num_users))
    for _ in users:
        taste = rng.dirichlet(np.full(cats, cfg.taste_concentration))  # [C]
        length = int(rng.integers(cfg.min_len, cfg.max_len + 1))
        u = rng.random((length, 3))  # [T, 3]: stay?, which neighbour / category, which item
        drift = rng.dirichlet(np.full(cats, cfg.taste_concentration), size=length)  # [T, C]
        seq = np.empty(length, dtype=np.int64)
        for t in range(length):
            if t > 0 and u[t, 0] < cfg.stay:
                prev = seq[t - 1]
                seq[t] = nbr[prev, _draw(nbr_cdf[prev], u[t, 1])]
            else:
                c = _draw(np.cumsum(taste * alive), u[t, 1])
                seq[t] = members[c][_draw(in_cat_cdf[c], u[t, 2])]
            taste = (1.0 - cfg.drift) * taste + cfg.drift * drift[t]
        sequences.append(seq)
    return Interactions(emb, category.astype(np.int64), weight, sequences)


def _draw(cdf: np.ndarray, u: float) -> int:  # cdf [K] increasing (unnormalised ok)
    return min(int(np.searchsorted(cdf, u * cdf[-1], side="right")), len(cdf) - 1)


def _neighbour_table(
    emb: np.ndarray,  # [I, D] float32
    weight: np.ndarray,  # [I] float64
    cfg: DataConfig,
) -> tuple[np.ndarray, np.ndarray]:  # ([I, M] int64 neighbours, [I, M] float64 probabilities)
    sq = np.einsum("id,id->i", emb, emb)
    d2 = sq[:, None] + sq[None, :] - 2.0 * (emb @ emb.T)  # [I, I]
    np.fill_diagonal(d2, np.inf)  # never "move on" to the same item
    m = cfg.neighbours
    nbr = np.argpartition(d2, m, axis=1)[:, :m]  # [I, M], unordered
    nd2 = np.take_along_axis(d2, nbr, axis=1).astype(np.float64)  # [I, M]
    # Scale by the item's typical neighbour distance so the temperature is unit-free.
    logits = -(nd2 / nd2.mean(axis=1, keepdims=True)) / cfg.temperature
    logits += cfg.popularity_bias * np.log(weight[nbr])
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    return nbr.astype(np.int64), p / p.sum(axis=1, keepdims=True)
