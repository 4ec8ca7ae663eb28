"""FP8 KV quantization (`fp8_kv.py`): per-head scales, saturation instead of NaN, rounding to
nearest even, and the checks on the scales themselves."""

from __future__ import annotations

import pytest
import torch

from widebeam.kernels.kv.fp8_kv import KV_FP8_DTYPE, KvScales, dequantize_kv, quantize_kv

E4M3 = torch.arange(256, dtype=torch.uint8).view(KV_FP8_DTYPE).float()
FINITE = E4M3[E4M3.isfinite()].unique()  # every e4m3 value, ascending


def test_each_head_uses_its_own_scale() -> None:
    scales = KvScales.of(torch.tensor([0.5, 4.0]), torch.tensor([1.0, 1.0]))
    x = torch.tensor([[[3.0, -7.0]], [[3.0, -7.0]]]).transpose(0, 1)  # [1, 2 heads, 2]
    stored = quantize_kv(x, scales.k_inv)
    assert stored.float().tolist() == [[[6.0, -14.0], [0.75, -1.75]]]
    assert torch.equal(dequantize_kv(stored, scales.k), x)


def test_values_beyond_range_saturate_never_nan() -> None:
    scale = torch.tensor([0.01])
    x = torch.tensor([[1e30, -1e30, 5.0, -4.48, 4.48]])[:, None, :]  # [1, 1 head, 5]
    back = dequantize_kv(quantize_kv(x, 1.0 / scale), scale)
    assert back.isfinite().all()
    assert back.flatten().tolist() == pytest.approx([4.48, -4.48, 4.48, -4.48, 4.48])


def test_every_e4m3_value_round_trips_and_midpoints_go_to_even() -> None:
    one = torch.ones(1)
    values = FINITE[:, None, None]  # [n, 1 head, 1]
    assert torch.equal(quantize_kv(values, one).float(), values)
    low, high = FINITE[:-1], FINITE[1:]
    midpoints = ((low + high) / 2)[:, None, None]
    rounded = quantize_kv(midpoints, one).float().flatten()
    even = (low.to(KV_FP8_DTYPE).view(torch.uint8) & 1) == 0
    assert torch.equal(rounded, torch.where(even, low, high))


@pytest.mark.parametrize(
    ("k", "message"),
    [
        (torch.tensor([1.0, 0.0]), "positive and finite"),
        (torch.tensor([1.0, float("inf")]), "positive and finite"),
        (torch.tensor([1.0, -2.0]), "positive and finite"),
        (torch.tensor([1.0, 2.0], dtype=torch.float64), "must be fp32"),
    ],
)
def test_bad_scales_are_refused(k: torch.Tensor, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        KvScales.of(k, torch.ones(2))


def test_layer_views_of_the_tables() -> None:
    tables = KvScales.of(torch.rand(3, 2) + 0.1, torch.rand(3, 2) + 0.1)
    layer = tables.layer(1)
    assert layer.k.data_ptr() == tables.k[1].data_ptr()
    assert torch.equal(layer.v_inv, 1.0 / tables.v[1])
