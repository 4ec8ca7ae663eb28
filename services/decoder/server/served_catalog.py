"""One catalog version as the server holds it: the engine's trie tensors plus the item index
Recommend needs. Built off the request path; immutable once built."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch

from widebeam.services.catalog.sid_layout import SidLayout
from widebeam.services.catalog.trie import SidTrie
from widebeam.services.decoder.constraint.item_sid_index import ItemSidIndex
from widebeam.services.decoder.constraint.trie_constraint import TrieConstraint


@dataclass(frozen=True, eq=False)
class ServedCatalog:
    name: str
    constraint: TrieConstraint
    index: ItemSidIndex

    @property
    def version(self) -> str:
        return self.constraint.version

    @property
    def layout(self) -> SidLayout:
        return self.constraint.trie.layout

    @classmethod
    def from_constraint(cls, name: str, constraint: TrieConstraint) -> ServedCatalog:
        return cls(name, constraint, ItemSidIndex(constraint.trie))

    @classmethod
    def build(
        cls,
        name: str,
        trie: SidTrie,
        version: str,
        device: torch.device | str,
        derived: Mapping[str, np.ndarray] | None = None,  # `constraint_arrays(trie)`, if known
    ) -> ServedCatalog:
        constraint = TrieConstraint(trie, version=version, device=device, derived=derived)
        return cls.from_constraint(name, constraint)


def check_layout(trie: SidTrie, model_layout: SidLayout | None, vocab_size: int) -> None:
    """ValueError when a catalog's SIDs would not be the model's SID tokens."""
    if model_layout is not None and trie.layout != model_layout:
        raise ValueError(
            f"catalog SID layout {trie.layout.to_spec()!r} differs from the model's "
            f"{model_layout.to_spec()!r}"
        )
    trie.layout.validate_against_vocab(vocab_size)
