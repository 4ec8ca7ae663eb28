"""The KV cache's storage dtype: the model's, or FP8 with per-(layer, KV head) scales that writes
quantize with and `write_rows` hands back as stored."""

from __future__ import annotations

import pytest
import torch

from widebeam.kernels.kv.fp8_kv import KV_FP8_DTYPE, KvScales, dequantize_kv
from widebeam.services.decoder.config import KVDType
from widebeam.services.decoder.kv.kv_cache import KVCache, kv_storage_dtype, slots_of_pages

LAYERS, SLOTS, HEADS, DIM = 2, 32, 2, 8


def _scales() -> KvScales:
    k = torch.tensor([[0.01, 0.02], [0.03, 0.04]])
    return KvScales.of(k, 2 * k)


def test_storage_dtype() -> None:
    cpu = torch.device("cpu")
    assert kv_storage_dtype(KVDType.AUTO, torch.bfloat16, cpu) is torch.bfloat16
    assert kv_storage_dtype(KVDType.FP8, torch.float32, cpu) is KV_FP8_DTYPE


def test_fp8_writes_quantize_with_the_layers_scales() -> None:
    scales = _scales()
    cache = KVCache(LAYERS, SLOTS, HEADS, DIM, KV_FP8_DTYPE, "cpu", scales)
    gen = torch.Generator().manual_seed(0)
    k, v = torch.randn(2, 5, HEADS, DIM, generator=gen)
    slots = torch.tensor([3, 9, 4, 20, 31])
    k_rows, v_rows = cache.write_rows(1, slots, k, v)
    # The stored FP8 values, widened to the model dtype by the write (the prefill's input).
    assert k_rows.dtype == v_rows.dtype == k.dtype
    assert torch.equal(cache.k[1, slots].float(), k_rows.float())
    assert torch.equal(cache.v[1, slots].float(), v_rows.float())
    assert not cache.k[0].float().any()  # layer 0 untouched
    back = dequantize_kv(cache.k[1, slots], scales.k[1])
    torch.testing.assert_close(back, k, rtol=2**-4, atol=2**-6 * 0.04)
    cache.write(0, slots[:2], 2 * k[:2], v[:2])
    assert not torch.equal(cache.k[0, slots[:2]].float(), k_rows[:2].float())


def test_model_dtype_write_rows_are_the_inputs() -> None:
    cache = KVCache(LAYERS, SLOTS, HEADS, DIM, torch.float32, "cpu")
    assert cache.layer_scales == (None, None)
    k = torch.randn(3, HEADS, DIM)
    rows = cache.write_rows(0, torch.tensor([1, 2, 3]), k, -k)
    assert rows[0] is k and torch.equal(cache.v[0, 1:4], -k)


def test_scales_and_dtype_must_match() -> None:
    with pytest.raises(ValueError, match="FP8 KV cache needs its scales"):
        KVCache(LAYERS, SLOTS, HEADS, DIM, KV_FP8_DTYPE, "cpu")
    with pytest.raises(ValueError, match="FP8 KV cache needs its scales"):
        KVCache(LAYERS, SLOTS, HEADS, DIM, torch.float32, "cpu", _scales())
    with pytest.raises(ValueError, match=r"KV scales of shape \(2, 2\) / \(2, 2\) for 3 layers"):
        KVCache(3, SLOTS, HEADS, DIM, KV_FP8_DTYPE, "cpu", _scales())


def test_fp8_write_rows_in_bf16_hold_the_stored_values() -> None:
    cache = KVCache(LAYERS, SLOTS, HEADS, DIM, KV_FP8_DTYPE, "cpu", _scales())
    k = torch.randn(4, HEADS, DIM).to(torch.bfloat16)
    slots = torch.tensor([0, 5, 6, 7])
    k_rows, v_rows = cache.write_rows(0, slots, k, 3 * k)
    assert k_rows.dtype == v_rows.dtype == torch.bfloat16
    assert torch.equal(k_rows, cache.k[0, slots].to(torch.bfloat16))
    assert torch.equal(v_rows, cache.v[0, slots].to(torch.bfloat16))


def test_fp8_write_rows_as_stored_for_a_prefill_that_multiplies_fp8() -> None:
    cache = KVCache(LAYERS, SLOTS, HEADS, DIM, KV_FP8_DTYPE, "cpu", _scales())
    k = torch.randn(4, HEADS, DIM).to(torch.bfloat16)
    slots = torch.tensor([1, 2, 8, 9])
    k_rows, v_rows = cache.write_rows(1, slots, k, -2 * k, fp8_rows=True)
    assert k_rows.dtype == v_rows.dtype == KV_FP8_DTYPE
    assert torch.equal(k_rows.view(torch.uint8), cache.k[1, slots].view(torch.uint8))
    assert torch.equal(v_rows.view(torch.uint8), cache.v[1, slots].view(torch.uint8))
    model_dtype = KVCache(LAYERS, SLOTS, HEADS, DIM, torch.bfloat16, "cpu")
    assert model_dtype.write_rows(0, slots, k, k, fp8_rows=True)[0] is k  # nothing to narrow


@pytest.mark.parametrize(
    ("pages", "page_size", "want"),
    [
        ([3, 0], 4, [12, 13, 14, 15, 0, 1, 2, 3]),
        ([7], 1, [7]),
        ([], 16, []),  # a request whose pages are all shared holds none of its own
        ([2, 1], 16, list(range(32, 48)) + list(range(16, 32))),
    ],
)
def test_slots_of_pages_lists_every_slot_in_page_order(
    pages: list[int], page_size: int, want: list[int]
) -> None:
    slots = slots_of_pages(pages, page_size, "cpu")
    assert slots.dtype == torch.int64 and slots.shape == (len(want),)
    assert slots.tolist() == want
