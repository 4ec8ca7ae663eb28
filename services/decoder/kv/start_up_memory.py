"""Start-up steps that run out of GPU memory beside the KV cache (its allocation, the catalog's
load onto the device, the start-up capture) say so in the cache's terms: how big it is, what
sized it, and which settings trade against it, instead of a bare allocation failure deep in a
kernel call. What a memory fraction leaves beside the cache is all the rest of start-up has
(`kv_capacity.py`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from widebeam.services.decoder.config import EngineConfig


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
