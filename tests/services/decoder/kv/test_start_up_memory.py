"""A start-up step that runs out of GPU memory beside the KV cache says how big the cache is,
what sized it, and what to give less; other errors pass through unchanged."""

from __future__ import annotations

import pytest
import torch

from widebeam.services.decoder.config import EngineConfig
from widebeam.services.decoder.kv.kv_capacity import kv_slot_bytes
from widebeam.services.decoder.kv.start_up_memory import StartUpMemoryError, start_up_memory


def test_out_of_memory_at_start_up_names_the_cache_and_what_trades_against_it() -> None:
    fraction = EngineConfig(model_dir="/m", device="cuda", kv_memory_fraction=0.9, max_rows=20000)
    slot_bytes = kv_slot_bytes(28, 8, 128, torch.bfloat16)
    capturing = start_up_memory(fraction, 649_840, slot_bytes, "capturing (decode 20000)", True)
    with pytest.raises(StartUpMemoryError) as raised, capturing:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 256.00 MiB")
    message = str(raised.value)
    assert isinstance(raised.value.__cause__, torch.OutOfMemoryError)
    assert message.startswith("out of GPU memory capturing (decode 20000), beside a KV cache")
    assert "649840 slots (69.41 GiB, from kv_memory_fraction 0.9 of the free memory)" in message
    assert "max_capture_rows, now 20000 of max_rows 20000" in message
    # Not the capture: its remedies are not offered; a slot count is named as given.
    given = EngineConfig(model_dir="/m", device="cuda", max_kv_slots=4096, max_capture_rows=64)
    loading = start_up_memory(given, 4096, 100, "loading the catalog onto the device")
    with pytest.raises(StartUpMemoryError) as raised, loading:
        raise torch.OutOfMemoryError("CUDA out of memory")
    assert "from max_kv_slots 4096)" in str(raised.value)
    assert "max_capture_rows" not in str(raised.value)


def test_start_up_memory_lets_other_errors_through() -> None:
    config = EngineConfig(model_dir="/m")
    loading = start_up_memory(config, 4096, 100, "loading the catalog onto the device")
    with pytest.raises(ValueError, match="not memory"), loading:
        raise ValueError("not memory")
    with start_up_memory(config, 4096, 100, "loading the catalog onto the device"):
        pass  # nothing raised: nothing changed
