"""How many KV slots the engine's cache holds: the configured count, or what a fraction of the
GPU memory free after the weights load can hold.

Precedence: `max_kv_slots` when given; else `kv_memory_fraction` (CUDA only, checked by
`EngineConfig`); else `DEFAULT_KV_SLOTS`. The cache allocates one page beyond the returned count
(the trash page padded decode rows write to), so a fraction sizes that page in too.

What the cache leaves is all the rest of start-up has: the catalogs' device arrays and the
start-up capture's graph pools and workspaces (which grow with the rows captured). Start-up
steps that run out of GPU memory there say so in those terms (`start_up_memory`), not as a bare
allocation failure deep in a kernel call.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

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


class StartUpMemoryError(RuntimeError):
    """Start-up ran out of GPU memory beside the KV cache; the message says what to give less."""


@contextlib.contextmanager
def start_up_memory(
    config: EngineConfig, kv_slots: int, slot_bytes: int, during: str, capture: bool = False
) -> Iterator[None]:
    """Turns a CUDA out-of-memory error raised `during` a start-up step (`capture`: the
    start-up capture) into a StartUpMemoryError naming the cache's size and the settings that
    trade against it."""
    try:
        yield
    except torch.OutOfMemoryError as exc:
        advice = start_up_memory_advice(config, kv_slots, slot_bytes, during, capture)
        raise StartUpMemoryError(advice) from exc


def start_up_memory_advice(
    config: EngineConfig, kv_slots: int, slot_bytes: int, during: str, capture: bool = False
) -> str:
    if config.max_kv_slots is not None or config.kv_memory_fraction is None:
        sized_by = f"max_kv_slots {kv_slots}"
    else:
        sized_by = f"kv_memory_fraction {config.kv_memory_fraction} of the free memory"
    advice = (
        f"out of GPU memory {during}, beside a KV cache of {kv_slots} slots "
        f"({kv_slots * slot_bytes / 2**30:.2f} GiB, from {sized_by}): give the KV cache less "
        f"(a lower kv_memory_fraction, or max_kv_slots)"
    )
    if capture:
        rows = config.max_capture_rows or config.max_rows
        advice += (
            f", or capture fewer rows at start-up (max_capture_rows, now {rows} of max_rows "
            f"{config.max_rows}; or capture_at_start false)"
        )
    return advice
