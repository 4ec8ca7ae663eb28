"""Prefill of prompts whose first pages are cached: only the uncached suffix tokens run through
the model, and they attend over the whole prompt — the cached prefix's KV read from its pages.

The attention backends' prefill kernels take the batch's fresh K and V and attend causally
within each segment; none reads keys from the cache. So each layer gathers the whole prompt's
K and V from the cache (the suffix's own were written just before, `PrefixPrefillContext`) and
runs the backend's ordinary causal prefill over full-length segments, with zero queries at the
cached positions whose outputs are dropped. A suffix token then sees exactly the keys, in the
same order and positions, that it sees in a prefill of the whole prompt; what is saved is every
linear layer, MLP and norm of the cached tokens (the wasted attention rows cost ~P² per prompt,
small beside those). Runs eagerly (not CUDA-graph bucketed), which is why the runner uses it
only where no prefill graph holds the batch (`ModelRunner.prefill`)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from widebeam.kernels.attention.metadata import PrefillBatch
from widebeam.services.decoder.host_copies import to_device_async


class PrefixPrefillInputs(NamedTuple):
    ids: torch.Tensor  # [S] int64, the suffix tokens of every prompt, back to back
    positions: torch.Tensor  # [S] int64, their positions in their prompts
    write_slots: torch.Tensor  # [S] int64, their KV slots
    full_slots: torch.Tensor  # [F] int64, every prompt's slots, cached prefix first
    query_index: torch.Tensor  # [S] int64, each suffix token's row among the F
    last: torch.Tensor  # [P] int64, each prompt's last token among the S
    full_batch: PrefillBatch  # the F rows' segments: one per whole prompt


def prefix_prefill_inputs(
    prompts: list[tuple[int, ...]],
    prompt_slots: list[torch.Tensor],  # each [prompt_len] int64 on the device
    cached: list[int],  # each prompt's tokens already in the cache (< its length)
    device: torch.device,
) -> PrefixPrefillInputs:
    lengths = np.array([len(p) for p in prompts], dtype=np.int64)
    starts = np.array(cached, dtype=np.int64)
    if np.any(starts >= lengths) or np.any(starts < 0):
        raise ValueError("a prompt's cached prefix must leave at least its last token to prefill")
    suffix = lengths - starts
    full_ends = np.cumsum(lengths)
    suffix_ends = np.cumsum(suffix)
    first_in_suffix = np.repeat(suffix_ends - suffix, suffix)  # [S] each token's segment start
    offsets = np.arange(int(suffix_ends[-1])) - first_in_suffix  # [S] index within its suffix
    positions = np.repeat(starts, suffix) + offsets
    query_index = np.repeat(full_ends - lengths, suffix) + positions
    ids = np.fromiter((t for p, c in zip(prompts, cached, strict=True) for t in p[c:]), np.int64)
    host = torch.from_numpy(np.concatenate((ids, positions, query_index, suffix_ends - 1)))
    packed = to_device_async(host, device)  # one queued copy
    count = len(ids)
    full_slots = torch.cat(prompt_slots)
    write_slots = torch.cat([s[c:] for s, c in zip(prompt_slots, cached, strict=True)])
    return PrefixPrefillInputs(
        packed[:count],
        packed[count : 2 * count],
        write_slots,
        full_slots,
        packed[2 * count : 3 * count],
        packed[3 * count :],
        PrefillBatch((0, *(int(e) for e in full_ends))),
    )
