"""The blocked per-row top-k equals torch.topk on random rows, ties and -inf included."""

from __future__ import annotations

import pytest
import torch

from widebeam.services.decoder.beam.row_topk import row_topk


@pytest.mark.parametrize("vocab", [1000, 1024, 4099])
@pytest.mark.parametrize("count", [1, 3, 8])
@pytest.mark.parametrize("block", [4, 16, 64])
def test_row_topk_equals_torch(vocab: int, count: int, block: int) -> None:
    gen = torch.Generator().manual_seed(vocab + count + block)
    x = torch.randn(37, vocab, generator=gen)
    x[3, :] = float("-inf")
    x[4, ::3] = float("-inf")
    x[5] = torch.round(x[5])  # many exact ties
    values, cols = row_topk(x, count, block=block)
    want, _ = torch.topk(x, count, dim=1)
    assert torch.equal(values, want)
    assert torch.equal(x.gather(1, cols), values)  # the columns hold those values
    finite = torch.isfinite(values)
    for row in range(x.shape[0]):  # no column twice among real values
        picked = cols[row][finite[row]].tolist()
        assert len(picked) == len(set(picked))
