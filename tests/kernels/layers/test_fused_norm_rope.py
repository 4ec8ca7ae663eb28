"""The fused residual-add + RMSNorm and q/k-norm + rope kernels against the torch reference
(compiled on CUDA, interpreted on the CPU): ragged row counts, GQA and not, head dims 64/128,
with and without Qwen3's qk norm, bf16 and fp32, q/k as strided views of a fused qkv tensor."""

from __future__ import annotations

import pytest
import torch

from widebeam.kernels.layers.torch_ref import add_rms_norm_ref, qk_norm_rope_ref, rms_norm_ref
from widebeam.services.decoder.model.layers import RotaryEmbedding

DTYPES = [torch.float32, torch.bfloat16]
TOL = {torch.float32: 1e-5, torch.bfloat16: 2**-6}  # two bf16 ulps (as test_triton_layers)


def _assert_normed_close(got: torch.Tensor, want: torch.Tensor) -> None:
    """After a norm: the fp32 sum of squares and rsqrt may differ in the last place, which moves
    the last place of an fp32 result but only rarely flips a bf16 rounding; with the rounding
    points matched almost every bf16 element is bit-identical."""
    tol = TOL[want.dtype]
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)
    if want.dtype == torch.bfloat16 and want.numel():
        assert (got != want).float().mean().item() <= 1e-3


def _qkv(
    n: int, hq: int, hkv: int, d: int, dtype: torch.dtype, device: torch.device, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """q [n, hq, d], k [n, hkv, d] as views of one [n, (hq + 2 hkv) d] projection output."""
    gen = torch.Generator().manual_seed(seed)
    qkv = (torch.randn(n, (hq + 2 * hkv) * d, generator=gen) * 3).to(dtype).to(device)
    q = qkv[:, : hq * d].view(n, hq, d)
    k = qkv[:, hq * d : (hq + hkv) * d].view(n, hkv, d)
    return q, k


def _tables(n: int, d: int, device: torch.device, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    positions = torch.randint(0, 40_000, (n,), generator=gen)  # large angles, both signs
    cos, sin = RotaryEmbedding(d, 1_000_000.0, None)(positions)
    return cos.to(device), sin.to(device)


@pytest.mark.parametrize("n", [0, 1, 7, 40])  # one program per row: 40 rows of random angles
@pytest.mark.parametrize(("hq", "hkv", "d"), [(16, 8, 128), (8, 8, 64), (6, 2, 64)])
@pytest.mark.parametrize("qk_norm", [True, False], ids=["qk_norm", "rope_only"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_qk_norm_rope(
    exact_device: torch.device,
    n: int,
    hq: int,
    hkv: int,
    d: int,
    qk_norm: bool,
    dtype: torch.dtype,
) -> None:
    from widebeam.kernels.layers.triton_rope import qk_norm_rope_triton

    q, k = _qkv(n, hq, hkv, d, dtype, exact_device, seed=n + hq + d)
    assert n < 2 or not q.is_contiguous()  # rows strided by the fused projection
    cos, sin = _tables(n, d, exact_device, seed=n)
    gen = torch.Generator().manual_seed(d)
    weights = [(torch.rand(d, generator=gen) + 0.5).to(dtype).to(exact_device) for _ in "qk"]
    q_w, k_w = weights if qk_norm else (None, None)
    got = qk_norm_rope_triton(q, k, cos, sin, q_w, k_w, 1e-6)
    want = qk_norm_rope_ref(q, k, cos, sin, q_w, k_w, 1e-6)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype and g.is_contiguous()
        if qk_norm:
            _assert_normed_close(g, w)
        else:  # rope alone: every rounding point matched, so bit-identical
            assert torch.equal(g, w)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rope_on_normed_input_is_exact(exact_device: torch.device, dtype: torch.dtype) -> None:
    """Rope alone is bit-exact on realistic inputs too: the reference's normed q/k (unit RMS),
    as the model feeds them."""
    from widebeam.kernels.layers.triton_rope import qk_norm_rope_triton

    q, k = _qkv(33, 16, 8, 128, dtype, exact_device, seed=5)
    w = torch.rand(128, generator=torch.Generator().manual_seed(1)).to(dtype).to(exact_device)
    q, k = rms_norm_ref(q, w, 1e-6), rms_norm_ref(k, w, 1e-6)
    cos, sin = _tables(33, 128, exact_device, seed=2)
    got = qk_norm_rope_triton(q, k, cos, sin, None, None, 1e-6)
    want = qk_norm_rope_ref(q, k, cos, sin, None, None, 1e-6)
    assert all(torch.equal(g, r) for g, r in zip(got, want, strict=True))


def test_qk_norm_rope_rejects_bad_shapes(exact_device: torch.device) -> None:
    from widebeam.kernels.layers.triton_rope import qk_norm_rope_triton

    q, k = _qkv(3, 4, 2, 64, torch.float32, exact_device, seed=0)
    cos, sin = _tables(3, 64, exact_device, seed=0)
    w = torch.ones(64, device=exact_device)
    with pytest.raises(ValueError, match="must be"):
        qk_norm_rope_triton(q, k, cos[:2], sin[:2], None, None, 1e-6)
    with pytest.raises(ValueError, match="together"):
        qk_norm_rope_triton(q, k, cos, sin, w, None, 1e-6)
    with pytest.raises(ValueError, match="rows and even D"):
        qk_norm_rope_triton(q, k[:2], cos, sin, None, None, 1e-6)


@pytest.mark.parametrize("shape", [(5, 64), (3, 4, 128), (1, 1000), (300, 96), (0, 32)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_add_rms_norm(
    exact_device: torch.device, shape: tuple[int, ...], dtype: torch.dtype
) -> None:
    from widebeam.kernels.layers.triton_layers import add_rms_norm_triton

    gen = torch.Generator().manual_seed(sum(shape))
    x, res = ((torch.randn(shape, generator=gen) * 3).to(dtype).to(exact_device) for _ in "xr")
    w = (torch.rand(shape[-1], generator=gen) + 0.5).to(dtype).to(exact_device)
    normed, new_res = add_rms_norm_triton(x, res, w, 1e-6)
    want_normed, want_res = add_rms_norm_ref(x, res, w, 1e-6)
    assert normed.shape == want_normed.shape and normed.dtype == dtype
    assert torch.equal(new_res, want_res)  # the add is one rounding either way
    _assert_normed_close(normed, want_normed)


def test_add_rms_norm_strided_rows(exact_device: torch.device) -> None:
    """A residual that is a row-strided view (a slice of a wider buffer) is read in place."""
    from widebeam.kernels.layers.triton_layers import add_rms_norm_triton

    gen = torch.Generator().manual_seed(3)
    wide = torch.randn(9, 160, generator=gen).to(torch.bfloat16).to(exact_device)
    x, res = wide[:, :64], wide[:, 80:144]
    w = torch.ones(64, dtype=torch.bfloat16, device=exact_device)
    normed, new_res = add_rms_norm_triton(x, res, w, 1e-6)
    want_normed, want_res = add_rms_norm_ref(x, res, w, 1e-6)
    assert torch.equal(new_res, want_res)
    _assert_normed_close(normed, want_normed)
    with pytest.raises(ValueError, match="must match"):
        add_rms_norm_triton(x, res.float(), w, 1e-6)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_qwen_shapes_on_gpu() -> None:
    """Benchmark shapes (Qwen3-0.6B, 5,120 rows): add+norm over hidden 1024; q/k norm + rope
    over 16/8 heads of 128 from one qkv projection. fp32 rope-only must be bit-exact (the kernel
    is compiled without FMA contraction)."""
    from widebeam.kernels.layers.triton_layers import add_rms_norm_triton
    from widebeam.kernels.layers.triton_rope import qk_norm_rope_triton

    dev, n = torch.device("cuda"), 5120
    gen = torch.Generator(device="cuda").manual_seed(0)
    x, res = (torch.randn(n, 1024, device=dev, generator=gen).to(torch.bfloat16) for _ in "xr")
    w = torch.rand(1024, device=dev, generator=gen).to(torch.bfloat16) + 0.5
    normed, new_res = add_rms_norm_triton(x, res, w, 1e-6)
    want_normed, want_res = add_rms_norm_ref(x, res, w, 1e-6)
    assert torch.equal(new_res, want_res)
    _assert_normed_close(normed, want_normed)
    cos, sin = _tables(n, 128, dev, seed=0)
    for dtype in DTYPES:
        q, k = _qkv(n, 16, 8, 128, dtype, dev, seed=1)
        qw, kw = (torch.rand(128, device=dev, generator=gen).to(dtype) + 0.5 for _ in "qk")
        got = qk_norm_rope_triton(q, k, cos, sin, qw, kw, 1e-6)
        want = qk_norm_rope_ref(q, k, cos, sin, qw, kw, 1e-6)
        for g, r in zip(got, want, strict=True):
            _assert_normed_close(g, r)
        got = qk_norm_rope_triton(q, k, cos, sin, None, None, 1e-6)
        want = qk_norm_rope_ref(q, k, cos, sin, None, None, 1e-6)
        assert all(torch.equal(g, r) for g, r in zip(got, want, strict=True))
