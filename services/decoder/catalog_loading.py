"""Build the decoder's trie constraint from a catalog file and the model's SID layout."""

from __future__ import annotations

from pathlib import Path

import torch

from widebeam.services.catalog.jsonl_catalog import load_jsonl_catalog
from widebeam.services.catalog.sid_layout import SidLayout
from widebeam.services.catalog.trie import SidTrie
from widebeam.services.decoder.constraint.trie_constraint import TrieConstraint


def resolve_layout(model_dir: str | Path, spec: str | None, vocab_size: int) -> SidLayout:
    layout = SidLayout.parse(spec) if spec else SidLayout.from_tokenizer(model_dir)
    if layout is None:
        raise ValueError(
            f"no SID tokens (<s_a_N>, ...) in the tokenizer of {model_dir}: pass --sid-layout"
        )
    layout.validate_against_vocab(vocab_size)
    return layout


def load_catalog_constraint(
    path: str | Path, layout: SidLayout, device: torch.device | str
) -> TrieConstraint:
    trie = SidTrie.build(load_jsonl_catalog(path), layout)
    return TrieConstraint(trie, version=f"file-{trie.content_hash[:12]}", device=device)
