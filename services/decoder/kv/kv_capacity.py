"""How many KV slots the engine's cache holds: the configured count, or what a fraction of the
GPU memory free after the weights load can hold.

Precedence: `max_kv_slots` when given; else `kv_memory_fraction` (CUDA only, checked by
`EngineConfig`); else `DEFAULT_KV_SLOTS`. The cache allocates one page beyond the returned count
(the trash page padded decode rows write to), so a fraction sizes that page in too.

What the cache leaves is all the rest of start-up has: the catalogs' device arrays and the
start-up capture's graph pools and workspaces (which grow with the rows captured); see
`start_up_memory.py` for what start-up says when that is too little.
"""

from __future__ import annotations

import logging

import torch

from widebeam.services.decoder.config import DEFAULT_KV_SLOTS, EngineConfig

log = logging.getLogger(__name__)


def kv_slot_bytes(num_layers: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype) -> int:
    """Bytes one KV slot takes in `KVCache`: K and V of every layer."""
    return 2 * num_layers * num_kv_heads * head_dim * dtype.itemsize


def slots_in_budget(budget_bytes: int, slot_bytes: int, page_size: int) -> int:
    """Whole pages of slots that fit in `budget_bytes` with the trash page, minus that page."""
    pages = budget_bytes // (slot_bytes * page_size) - 1
    return max(pages, 0) * page_size


def kv_capacity_slots(config: EngineConfig, slot_bytes: int, device: torch.device) -> int:
    """The KV slots requests may reserve (called after the weights are on `device`)."""
    if config.max_kv_slots is not None:
        return config.max_kv_slots
    if config.kv_memory_fraction is None:
        return DEFAULT_KV_SLOTS
    # Blocks the weights' loading left cached count as used to mem_get_info: give them back.
    torch.cuda.empty_cache()
    free, total = torch.cuda.mem_get_info(device)
    budget = int(free * config.kv_memory_fraction)
    slots = slots_in_budget(budget, slot_bytes, config.page_size)
    if slots < config.page_size:
        raise ValueError(
            f"kv_memory_fraction {config.kv_memory_fraction} of the {free / 2**30:.2f} GiB free "
            f"on {device} holds less than one KV page ({config.page_size} slots of "
            f"{slot_bytes} bytes) beside the trash page: raise it, or give max_kv_slots"
        )
    log.info(
        "KV cache: %d slots (%.2f GiB) = %.2f of %.2f GiB free (%.2f GiB total) on %s",
        slots, slots * slot_bytes / 2**30, config.kv_memory_fraction, free / 2**30,
        total / 2**30, device,
    )  # fmt: skip
    return slots
