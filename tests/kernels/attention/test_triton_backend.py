"""The "triton" backend through the factory: DecodeBatch in, packed once per batch object."""

from __future__ import annotations

import torch

from tests.kernels.attention.cases import decode_case, tolerance
from widebeam.kernels.attention.metadata import PrefillBatch
from widebeam.kernels.attention.torch_ref import TorchAttention


def test_backend_decode_and_prefill(kernel_device: torch.device) -> None:
    from widebeam.kernels.attention.factory import BACKENDS, make_attention_backend
    from widebeam.kernels.attention.packed import PackedDecode

    assert "triton" in BACKENDS
    backend = make_attention_backend("triton", page_size=4)
    case = decode_case(
        [(4, 21, 2), (1, 5, 2)], q_heads=4, kv_heads=2, dim=32, dtype=torch.float32,
        device=kernel_device, seed=3, page_size=4,
    )  # fmt: skip
    ref = TorchAttention()
    expected = ref.decode(case.q, case.k_cache, case.v_cache, case.batch, 0.2)
    out = backend.decode(case.q, case.k_cache, case.v_cache, case.batch, 0.2)
    torch.testing.assert_close(out, expected, **tolerance(torch.float32))
    packed = backend.pack(case.batch, *case.q.shape[:2], case.k_cache.shape[1])  # type: ignore[attr-defined]
    assert isinstance(packed, PackedDecode) and packed.page_size == 4
    # A second layer of the same step reuses the packing; a pre-packed batch is accepted.
    assert backend.pack(case.batch, *case.q.shape[:2], case.k_cache.shape[1]) is packed  # type: ignore[attr-defined]
    again = backend.decode(case.q, case.k_cache, case.v_cache, packed, 0.2)
    torch.testing.assert_close(again, out, rtol=0, atol=0)

    cu = (0, 3, 20)
    q = torch.randn(20, 4, 32, device=kernel_device)
    k, v = (
        torch.randn(20, 2, 32, device=kernel_device),
        torch.randn(20, 2, 32, device=kernel_device),
    )
    got = backend.prefill(q, k, v, PrefillBatch(cu), 0.2)
    want = ref.prefill(q, k, v, PrefillBatch(cu), 0.2)
    torch.testing.assert_close(got, want, **tolerance(torch.float32))
