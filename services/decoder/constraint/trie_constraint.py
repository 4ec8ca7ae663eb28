"""A catalog trie as device tensors: which tokens each row may propose, and where it moves.

Rows sit on trie nodes. A node with children allows exactly its children's tokens. A complete
SID path (a leaf), or a row that has already left the trie (after EOS, or a dead row that took
a masked token), allows only the request's first EOS id — one way to end a SID, so two beams
never spend themselves on the same item with different EOS tokens. The transformers oracle's
`prefix_allowed_tokens_fn` in the tests follows the same rule.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence

import numpy as np
import torch

from widebeam.services.catalog.trie import SidTrie
from widebeam.services.decoder.constraint.path_items import PathItems
from widebeam.services.decoder.constraint.trie_arrays import checked, constraint_arrays

OFF_TRIE = -1


def _device_copy(array: np.ndarray, device: torch.device) -> torch.Tensor:  # int64
    """``array`` as an int64 tensor on ``device``. On the CPU an int64 array is shared, not
    copied (a 10M-item trie's offsets are 140 MB); any other goes through torch's own cast,
    which leaves the GIL to the serving threads while a new version is built beside them
    (``torch.tensor`` of a numpy array copies holding it). Never written: trie versions are
    immutable, which is why the array is read-only and torch's warning about that is moot."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        shared = torch.from_numpy(array)
    if device.type == "cpu" and shared.dtype == torch.int64:
        return shared
    return shared.to(device=device, dtype=torch.int64)


class TrieConstraint:
    def __init__(
        self,
        trie: SidTrie,
        version: str,
        device: torch.device | str,
        derived: Mapping[str, np.ndarray] | None = None,
    ) -> None:
        """`derived`: `constraint_arrays(trie)`, when another process computed them (a load
        child); derived here otherwise."""
        self.trie = trie
        self.version = version
        self.device = torch.device(device)
        arrays = constraint_arrays(trie) if derived is None else checked(trie, derived)
        self.child_offsets = _device_copy(trie.child_offsets, self.device)  # [nodes+1] int64
        self.child_tokens = _device_copy(arrays["child_tokens"], self.device)  # [edges] int64
        self.child_nodes = _device_copy(arrays["child_nodes"], self.device)  # [edges] int64
        # Edge keys node * key_base + token: finished beams' items are looked up on the host,
        # the device's searchsorted table is the same array.
        self.key_base = int(arrays["key_base"])
        self.path_items = PathItems(trie, arrays["edge_keys"], self.key_base)
        self.edge_keys = _device_copy(arrays["edge_keys"], self.device)  # [edges] int64
        # Widest node: the candidate width of the sparse path (+1 for the EOS of a leaf).
        self.max_fanout = int(arrays["max_fanout"])
        self._sid_columns: dict[int | None, torch.Tensor] = {}
        self._sid_masks: dict[tuple[int | None, int], torch.Tensor] = {}

    def sid_columns(self, eos_ids: tuple[int, ...]) -> torch.Tensor:  # [S] int64, sorted
        """The tokens "sid" normalisation keeps: the SID layout's (every level's codes, its
        begin and end tokens) plus the first EOS id, the only other token a constrained row
        can propose. The layout's, not the catalog's: adding items never moves a score. Built
        on the host once per first EOS id, so a captured step only reads the cached tensor."""
        first = eos_ids[0] if eos_ids else None
        columns = self._sid_columns.get(first)
        if columns is None:
            layout = self.trie.layout
            singles = [layout.begin_token_id, layout.end_token_id, first]
            parts = [np.arange(lv.base, lv.end, dtype=np.int64) for lv in layout.levels]
            parts.append(np.asarray([t for t in singles if t is not None], dtype=np.int64))
            tokens = np.unique(np.concatenate(parts))
            columns = torch.from_numpy(tokens).to(self.device)
            self._sid_columns[first] = columns
        return columns

    def sid_mask(self, eos_ids: tuple[int, ...], vocab_size: int) -> torch.Tensor:
        """[vocab] fp32: 0 on `sid_columns`, -inf elsewhere; added to full logits it gives
        "sid" normalisation on the dense path."""
        key = (eos_ids[0] if eos_ids else None, vocab_size)
        mask = self._sid_masks.get(key)
        if mask is None:
            mask = torch.full((vocab_size,), float("-inf"), device=self.device)
            mask[self.sid_columns(eos_ids)] = 0.0
            self._sid_masks[key] = mask
        return mask

    def path_length(self, prompt_ids: tuple[int, ...]) -> int:
        layout = self.trie.layout
        include_begin = layout.begin_token_id is not None and (
            not prompt_ids or prompt_ids[-1] != layout.begin_token_id
        )
        return layout.path_length(include_begin)

    def start_node(self, prompt_ids: tuple[int, ...]) -> int:
        begin = self.trie.layout.begin_token_id
        return self.trie.start_node(bool(prompt_ids) and prompt_ids[-1] == begin)

    def mask(
        self,
        nodes: torch.Tensor,  # [R] int64 trie nodes (or OFF_TRIE)
        eos_ids: torch.Tensor,  # [n_eos] int64; the first one ends a SID
        vocab_size: int,
    ) -> torch.Tensor:  # [R, vocab] fp32, 0 where allowed, -inf elsewhere
        """`allowed_tokens` scattered into full rows, at fixed shapes: no read from the device."""
        tokens, valid = self.allowed_tokens(nodes, eos_ids)  # [R, W]
        mask = torch.full((nodes.shape[0], vocab_size), float("-inf"), device=self.device)
        lanes = torch.where(valid, 0.0, float("-inf"))  # [R, W] fp32
        # Padding lanes hold token 0 too: the maximum keeps a real child's 0 there.
        return mask.scatter_reduce_(1, tokens, lanes, reduce="amax")

    def allowed_tokens(
        self,
        nodes: torch.Tensor,  # [R] int64 trie nodes (or OFF_TRIE)
        eos_ids: torch.Tensor,  # [n_eos] int64; the first one ends a SID
    ) -> tuple[torch.Tensor, torch.Tensor]:  # [R, W] int64 tokens, [R, W] bool valid
        """The same allowed set as `mask`, as padded per-row token lists (W = widest node, or 1
        for the EOS of a leaf): the sparse candidates of a wide beam, without [R, vocab]."""
        width = max(self.max_fanout, 1)
        on_trie = nodes >= 0
        safe = torch.where(on_trie, nodes, 0)
        starts = self.child_offsets[safe]
        counts = torch.where(on_trie, self.child_offsets[safe + 1] - starts, 0)
        lane = torch.arange(width, device=self.device)
        valid = lane[None, :] < counts[:, None]
        edge = (starts[:, None] + lane[None, :]).clamp(max=max(self.child_tokens.numel() - 1, 0))
        if self.child_tokens.numel():
            tokens = torch.where(valid, self.child_tokens[edge], 0)
        else:
            tokens = torch.zeros_like(edge)
        if eos_ids.numel():
            ending = (counts == 0)[:, None] & (lane[None, :] == 0)
            tokens = torch.where(ending, eos_ids[0], tokens)
            valid = valid | ending
        return tokens, valid

    def advance(
        self,
        nodes: torch.Tensor,  # [R] int64
        tokens: torch.Tensor,  # [R] int64
    ) -> torch.Tensor:  # [R] int64 child node, or OFF_TRIE
        if self.edge_keys.numel() == 0:
            return torch.full_like(nodes, OFF_TRIE)
        keys = nodes * self.key_base + tokens
        pos = torch.searchsorted(self.edge_keys, keys).clamp(max=self.edge_keys.numel() - 1)
        found = (nodes >= 0) & (tokens < self.key_base) & (self.edge_keys[pos] == keys)
        return torch.where(found, self.child_nodes[pos], OFF_TRIE)

    def advance_rows(
        self,
        nodes: torch.Tensor,  # [B, S] int64 the rows' nodes: S = k, or 1 when all share one
        parents: torch.Tensor,  # [B, k] int64 the row each new row extends
        tokens: torch.Tensor,  # [B, k] int64 the token each new row appends
    ) -> torch.Tensor:  # [B, k] int64 each new row's node (or OFF_TRIE)
        """A beam step's new rows on the trie: each one's parent's node, advanced by its token.
        At the first step every row still sits on its prompt's single start node (S = 1)."""
        batch, k = parents.shape
        at = nodes.expand(batch, k).gather(1, parents)  # [B, k] each parent's node
        return self.advance(at.reshape(-1), tokens.reshape(-1)).view(batch, k)

    def items_for_paths(
        self,
        prompt_ids: tuple[int, ...],
        paths: Sequence[Sequence[int]] | np.ndarray,  # or [m, L] int64, -1 after each end
    ) -> list[list[str]]:
        """The items each output path names (see `PathItems.items`)."""
        return self.path_items.items(self.start_node(prompt_ids), paths)
