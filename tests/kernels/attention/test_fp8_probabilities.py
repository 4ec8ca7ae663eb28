"""FP8 probabilities (`widebeam/kernels/attention/fp8_probabilities.py`): P V on FP8 tensor cores.

The reference rounds each probability against the row's maximum rounded up to an integer (log2
units) in one pass; the kernels' online softmax, whose earlier tiles are rescaled by powers of
two only, rounds every probability the same way whatever its key tiles and prompt splits. With
fp32 queries every other step is (nearly) exact, so the kernels land on that reference, and
measurably off the attention of unrounded probabilities.
"""

from __future__ import annotations

import math

import pytest
import torch

from tests.kernels.attention.test_fp8_kv import (
    PREFILL_CU,
    fp8_decode_inputs,
    fp8_prefill_inputs,
    rel_error,
)
from widebeam.kernels.attention.fp8_probabilities import FP8_P_SCALE, rounded_probabilities
from widebeam.kernels.attention.torch_ref import cascade_decode, causal_prefill
from widebeam.kernels.kv.fp8_kv import KV_FP8_DTYPE

# Relative error of the online softmax against the one-pass reference: not zero, because a
# probability rounded against an earlier, smaller maximum keeps more bits than the reference's
# where rescaling takes it below e4m3's normal range (2^-14 of the row's maximum, scaled)
ONLINE_BOUND = 1e-4


def _kernel_bound(device: torch.device) -> float:
    """How far a kernel may land from the reference of rounded probabilities: fp32 dots in the
    interpreter; on CUDA, FP8 tensor cores sum P V in their own (narrower) accumulator."""
    return 2e-3 if device.type == "cuda" else ONLINE_BOUND


def _online(
    scores: torch.Tensor,  # [R, T] fp32 natural units, -inf hidden
    v: torch.Tensor,  # [T, D] fp32
    tile: int,
) -> torch.Tensor:  # [R, D] fp32
    """The kernels' online softmax with FP8 probabilities, tile by tile, in torch."""
    s = scores / math.log(2.0)
    m = torch.full((s.shape[0],), float("-inf"))
    total = torch.zeros(s.shape[0])
    acc = torch.zeros(s.shape[0], v.shape[1])
    for t0 in range(0, s.shape[1], tile):
        part = s[:, t0 : t0 + tile]
        m_new = torch.ceil(torch.maximum(m, part.amax(dim=1)))
        m_ref = torch.where(torch.isinf(m_new), 0.0, m_new)
        p = torch.exp2(part - m_ref[:, None])
        alpha = torch.exp2(m - m_ref)
        total = total * alpha + p.sum(dim=1)
        rounded = (p * FP8_P_SCALE).to(KV_FP8_DTYPE).float()
        acc = acc * alpha[:, None] + rounded @ v[t0 : t0 + tile]
        m = m_new
    return torch.where(total[:, None] > 0, acc / (FP8_P_SCALE * total[:, None]), 0.0)


@pytest.mark.parametrize("tile", [1, 7, 64, 300])
def test_reference_rounds_as_the_online_softmax_over_any_tiles(tile: int) -> None:
    gen = torch.Generator().manual_seed(3)
    scores = torch.randn(24, 300, generator=gen) * 4
    scores[:, 150:] += torch.linspace(0, 9, 150)  # the maximum keeps moving: rescaled tiles
    scores[3] = float("-inf")  # a row that sees no key
    scores[5, 10:] = float("-inf")  # one that sees its first tile only
    v = torch.randn(300, 8, generator=gen)
    want = rounded_probabilities(scores) @ v
    got = _online(scores, v, tile)
    assert rel_error(got, want) < ONLINE_BOUND
    assert (want[3] == 0).all() and (got[3] == 0).all()
    seen = torch.arange(24) != 3
    exact = torch.softmax(scores[seen], dim=-1) @ v
    assert rel_error(want[seen], exact) > 100 * ONLINE_BOUND  # they are rounded


def test_rounded_probabilities_are_e4m3_values_over_their_sum() -> None:
    gen = torch.Generator().manual_seed(4)
    scores = torch.randn(6, 50, generator=gen) * 3
    probs = rounded_probabilities(scores)
    s = scores / math.log(2.0)
    p = torch.exp2(s - torch.ceil(s.amax(dim=-1, keepdim=True)))
    scaled = probs * p.sum(dim=-1, keepdim=True) * FP8_P_SCALE
    torch.testing.assert_close(scaled, (p * FP8_P_SCALE).to(KV_FP8_DTYPE).float())
    assert float((probs.sum(dim=-1) - 1).abs().max()) < 0.07  # within e4m3's 2^-4


@pytest.mark.parametrize(
    ("dim", "block_n", "queries", "tma", "split"),
    [
        (16, 16, False, False, True),
        (32, 32, False, False, True),
        (32, 32, True, False, True),
        (32, 32, True, True, True),
        (32, 32, True, True, False),
    ],
)
def test_triton_prefill_fp8_probabilities_match_the_reference(
    kernel_device: torch.device, dim: int, block_n: int, queries: bool, tma: bool, split: bool
) -> None:
    """Through the masked diagonal tiles and the unmasked ones before them (a 70-token prompt at
    16-token query blocks; or every tile masked), K and V handed over stored or widened, by
    pointer or by tensor descriptor; V is read transposed in 16-aligned tiles, so segments
    that start off that boundary (at 9 and 10) begin with a tile that hides the keys before
    them; P V tiles narrower than FP8 tensor cores take (16 < 32) widen both operands."""
    from widebeam.kernels.attention.triton_prefill import ragged_causal_prefill, tma_usable

    cu = PREFILL_CU
    q, k, v, scales, k8, v8 = fp8_prefill_inputs(dim, kernel_device)
    if tma and not tma_usable(q, k8, v8, values_transposed=True):
        pytest.skip("no tensor descriptors here (a GPU before compute capability 9)")
    flags = dict(fp8_queries=queries, fp8_probabilities=True)
    out = torch.full_like(q, float("nan"))
    ragged_causal_prefill(
        q, k8, v8, cu, 0.21, scales, out=out, block_q=16, block_n=block_n, tma=tma,
        split_diagonal=split, **flags,
    )  # fmt: skip
    rounded = causal_prefill(q, k8, v8, cu, 0.21, scales, **flags)
    exact = causal_prefill(q, k8, v8, cu, 0.21, scales, fp8_queries=queries)
    to_rounded, to_exact = rel_error(out, rounded), rel_error(out, exact)
    bound = _kernel_bound(kernel_device)
    assert to_rounded < bound and to_exact > 10 * to_rounded, (to_rounded, to_exact)
    widened = ragged_causal_prefill(
        q, k8.to(q.dtype), v8.to(q.dtype), cu, 0.21, scales, block_q=16, block_n=block_n,
        tma=tma, split_diagonal=split, **flags,
    )  # fmt: skip
    assert torch.equal(widened, out)
    with pytest.raises(ValueError, match="fp8_probabilities needs FP8 keys and values"):
        ragged_causal_prefill(q, k, v, cu, 0.21, fp8_probabilities=True)


@pytest.mark.parametrize(
    ("dim", "block_rows", "block_n", "queries"),
    [(16, 8, None, False), (32, 8, 32, False), (32, 64, None, True), (32, 8, 16, True)],
)
def test_triton_cascade_fp8_probabilities_match_the_reference(
    kernel_device: torch.device, dim: int, block_rows: int, block_n: int | None, queries: bool
) -> None:
    """The prefix kernel's P V over FP8 probabilities and V as stored, its prompts split in two
    and read in tiles of the kernel's choice or of 32 / 16 tokens (16: narrower than FP8
    tensor cores take, so both operands are widened): each split rounds against its own
    maximum and the merge still lands on the one-pass reference."""
    from widebeam.kernels.attention.triton_cascade import cascade_decode_packed

    case, scales, k8, v8, packed = fp8_decode_inputs(dim, block_rows, kernel_device, seed=33)
    flags = dict(fp8_queries=queries, fp8_probabilities=True)
    out = torch.full_like(case.q, float("nan"))
    cascade_decode_packed(case.q, k8, v8, packed, 0.17, scales, out=out, block_n=block_n, **flags)
    rounded = cascade_decode(case.q, k8, v8, case.batch, 0.17, scales, **flags)
    exact = cascade_decode(case.q, k8, v8, case.batch, 0.17, scales, fp8_queries=queries)
    real = case.real_rows
    to_rounded, to_exact = (rel_error(out[real], x[real]) for x in (rounded, exact))
    bound = _kernel_bound(kernel_device)
    assert to_rounded < bound and to_exact > 10 * to_rounded, (to_rounded, to_exact)
    assert (out[~real] == 0).all()
    with pytest.raises(ValueError, match="fp8_probabilities needs an FP8 cache"):
        cascade_decode_packed(
            case.q, case.k_cache, case.v_cache, packed, 0.17, fp8_probabilities=True
        )


def test_fp8_probabilities_reach_the_backends_that_have_them() -> None:
    from widebeam.kernels.attention.factory import make_attention_backend

    torch_backend = make_attention_backend("torch", fp8_probabilities=True)
    assert torch_backend.fp8_probabilities is True  # type: ignore[attr-defined]
    assert make_attention_backend("torch").fp8_probabilities is False  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="fp8_probabilities needs the torch or triton attention"):
        make_attention_backend("flashinfer", fp8_probabilities=True)
