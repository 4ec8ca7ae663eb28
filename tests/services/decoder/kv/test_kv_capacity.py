"""KV capacity: the configured slot count, the default, or a fraction of free CUDA memory; an
FP8 cache counts its own bytes, so a budget holds twice bfloat16's slots."""

from __future__ import annotations

import pytest
import torch

from tests.services.decoder.conftest import SidModel
from widebeam.kernels.kv.fp8_kv import KV_FP8_DTYPE, KvScales
from widebeam.services.decoder.config import DEFAULT_KV_SLOTS, EngineConfig
from widebeam.services.decoder.engine import Engine
from widebeam.services.decoder.kv.kv_cache import KVCache
from widebeam.services.decoder.kv.kv_capacity import (
    kv_capacity_slots,
    kv_slot_bytes,
    slots_in_budget,
)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_slot_bytes_are_the_cache_bytes_per_slot(dtype: torch.dtype) -> None:
    cache = KVCache(3, 64, 2, 8, dtype, "cpu")
    per_slot = (cache.k.nbytes + cache.v.nbytes) // cache.num_slots
    assert kv_slot_bytes(3, 2, 8, dtype) == per_slot


def test_fp8_slot_bytes_are_the_cache_bytes_per_slot() -> None:
    scales = KvScales.of(torch.ones(3, 2), torch.ones(3, 2))
    cache = KVCache(3, 64, 2, 8, KV_FP8_DTYPE, "cpu", scales)
    per_slot = (cache.k.nbytes + cache.v.nbytes) // cache.num_slots
    assert kv_slot_bytes(3, 2, 8, KV_FP8_DTYPE) == per_slot
    assert 2 * per_slot == kv_slot_bytes(3, 2, 8, torch.bfloat16)


def test_a_budget_holds_twice_the_slots_in_fp8() -> None:
    page = 16
    budget = 3 << 30  # at Qwen3-1.7B's shape: 28 layers, 8 KV heads of 128
    bf16 = slots_in_budget(budget, kv_slot_bytes(28, 8, 128, torch.bfloat16), page)
    fp8 = slots_in_budget(budget, kv_slot_bytes(28, 8, 128, KV_FP8_DTYPE), page)
    assert bf16 > 0 and 2 * bf16 <= fp8 <= 2 * bf16 + 2 * page  # the trash page counts once


def test_budget_holds_whole_pages_beside_the_trash_page() -> None:
    assert slots_in_budget(budget_bytes=5 * 16 * 100, slot_bytes=100, page_size=16) == 4 * 16
    assert slots_in_budget(budget_bytes=5 * 16 * 100 - 1, slot_bytes=100, page_size=16) == 3 * 16
    assert slots_in_budget(budget_bytes=16 * 100, slot_bytes=100, page_size=16) == 0


def test_slot_count_wins_then_the_default() -> None:
    device = torch.device("cpu")  # neither path measures the device
    given = EngineConfig(model_dir="/m", device="cuda", max_kv_slots=4096, kv_memory_fraction=0.9)
    assert kv_capacity_slots(given, 100, device) == 4096
    assert kv_capacity_slots(EngineConfig(model_dir="/m"), 100, device) == DEFAULT_KV_SLOTS


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_fraction_sizes_the_cache_from_free_memory(sid_model: SidModel) -> None:
    fraction = 0.05
    torch.cuda.empty_cache()
    free_before, _ = torch.cuda.mem_get_info()
    engine = Engine(
        EngineConfig(model_dir=str(sid_model.model_dir), device="cuda", kv_memory_fraction=fraction)
    )
    cache = engine.runner.cache
    kv_bytes = cache.k.nbytes + cache.v.nbytes
    # Sized from what was free after the (tiny) weights loaded: at most the fraction of what
    # was free before them, and not much less.
    assert 0.95 * fraction * free_before <= kv_bytes <= fraction * free_before
    page = engine.config.page_size
    assert engine.limits.max_kv_slots % page == 0
    assert cache.num_slots == engine.limits.max_kv_slots + page
