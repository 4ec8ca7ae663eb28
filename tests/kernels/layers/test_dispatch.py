"""CPU tensors and anything that needs a gradient take the reference layers."""

from __future__ import annotations

import torch

from widebeam.kernels.layers.dispatch import add_rms_norm, qk_norm_rope, rms_norm, silu_mul
from widebeam.kernels.layers.torch_ref import (
    add_rms_norm_ref,
    qk_norm_rope_ref,
    rms_norm_ref,
    silu_mul_ref,
)


def test_cpu_uses_the_reference() -> None:
    x, w = torch.randn(4, 8), torch.rand(8)
    assert torch.equal(rms_norm(x, w, 1e-6), rms_norm_ref(x, w, 1e-6))
    assert torch.equal(silu_mul(x, x), silu_mul_ref(x, x))
    r = torch.randn(4, 8)
    got, want = add_rms_norm(x, r, w, 1e-6), add_rms_norm_ref(x, r, w, 1e-6)
    assert all(torch.equal(g, e) for g, e in zip(got, want, strict=True))
    q, k, cos, sin = torch.randn(4, 2, 8), torch.randn(4, 1, 8), torch.randn(4, 8), torch.rand(4, 8)
    for qk_w in [(w, w), (None, None)]:
        got = qk_norm_rope(q, k, cos, sin, *qk_w, 1e-6)
        want = qk_norm_rope_ref(q, k, cos, sin, *qk_w, 1e-6)
        assert all(torch.equal(g, e) for g, e in zip(got, want, strict=True))


def test_add_rms_norm_ref_is_add_then_norm() -> None:
    """The unfused arithmetic exactly: torch's add (stored in bf16), then the norm."""
    x, r = (torch.randn(6, 32).to(torch.bfloat16) for _ in "xr")
    w = torch.rand(32).to(torch.bfloat16)
    normed, new_r = add_rms_norm_ref(x, r, w, 1e-6)
    assert torch.equal(new_r, r + x) and torch.equal(normed, rms_norm_ref(r + x, w, 1e-6))


def test_gradients_flow_through_the_reference() -> None:
    w = torch.rand(8, requires_grad=True)
    rms_norm(torch.randn(4, 8), w, 1e-6).sum().backward()
    assert w.grad is not None and w.grad.shape == (8,)
    w.grad = None
    q, k, cos, sin = torch.randn(4, 2, 8), torch.randn(4, 1, 8), torch.randn(4, 8), torch.rand(4, 8)
    sum(t.sum() for t in qk_norm_rope(q, k, cos, sin, w, w, 1e-6)).backward()
    assert w.grad is not None
