"""Build the decoder's trie constraint from a catalog file and the model's SID layout.

The file goes through the catalog service's own pipeline (``formats.load_trie``): every format
an upload takes (JSONL, CSV, Parquet, FlashRec, sid2pid; gzip or not, auto-detected), the same
validation, and per SID the same item order (popularity first) as the same file published
through Redis.
"""

from __future__ import annotations

from pathlib import Path

import torch

from widebeam.services.catalog.formats import load_trie
from widebeam.services.catalog.sid_layout import SidLayout
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
    """The catalog file at ``path`` as a constraint; ``CatalogError`` names the row at fault."""
    trie, _ = load_trie(Path(path), layout)
    return TrieConstraint(trie, version=f"file-{trie.content_hash[:12]}", device=device)
