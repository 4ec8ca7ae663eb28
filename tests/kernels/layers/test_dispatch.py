"""CPU tensors and anything that needs a gradient take the reference layers."""

from __future__ import annotations

import torch

from widebeam.kernels.layers.dispatch import rms_norm, silu_mul
from widebeam.kernels.layers.torch_ref import rms_norm_ref, silu_mul_ref


def test_cpu_uses_the_reference() -> None:
    x, w = torch.randn(4, 8), torch.rand(8)
    assert torch.equal(rms_norm(x, w, 1e-6), rms_norm_ref(x, w, 1e-6))
    assert torch.equal(silu_mul(x, x), silu_mul_ref(x, x))


def test_gradients_flow_through_the_reference() -> None:
    w = torch.rand(8, requires_grad=True)
    rms_norm(torch.randn(4, 8), w, 1e-6).sum().backward()
    assert w.grad is not None and w.grad.shape == (8,)
