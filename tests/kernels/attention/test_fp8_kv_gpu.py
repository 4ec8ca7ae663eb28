"""The FP8 KV kernels compiled on a CUDA device at serving shapes (Qwen3: Hq 16, Hkv 8, head_dim
128): the Triton write stores the torch reference's bytes, the cascade decode (prefix kernel +
suffix merge) and the ragged prefill read FP8 K and V as the reference does, and a captured
decode replays with its static scales."""

from __future__ import annotations

import itertools

import pytest
import torch

from tests.kernels.attention.cases import decode_case, tolerance
from tests.kernels.attention.test_fp8_kv import fp8_scales, quantized
from widebeam.kernels.attention.packed import pack_decode
from widebeam.kernels.attention.torch_ref import cascade_decode, causal_prefill
from widebeam.kernels.kv.fp8_kv import KV_FP8_DTYPE, quantize_kv
from widebeam.kernels.kv.kv_write import write_kv_ref

pytestmark = pytest.mark.gpu

DECODE = {  # id: (groups as (rows, prompt_len, suffix_len), dtype, page_size)
    "beam256-prompt1000": ([(256, 1000, 3)], torch.bfloat16, 16),
    "beam5000-prompt64-suffix128": ([(5000, 64, 128)], torch.bfloat16, 16),
    "ragged-bf16": ([(256, 1000, 3), (1, 5000, 17), (50, 300, 128), (7, 1, 1)], torch.bfloat16, 1),
    "ragged-fp32": ([(256, 1000, 3), (1, 5000, 17), (50, 300, 128), (7, 1, 1)], torch.float32, 16),
}


@pytest.mark.parametrize("name", list(DECODE))
def test_fp8_decode_serving_shapes(kernel_device: torch.device, name: str) -> None:
    from widebeam.kernels.attention.factory import make_attention_backend

    groups, dtype, page_size = DECODE[name]
    case = decode_case(
        groups, q_heads=16, kv_heads=8, dim=128, dtype=dtype, device=kernel_device,
        seed=list(DECODE).index(name), pad_rows=3, page_size=page_size,
    )  # fmt: skip
    scales = fp8_scales(case.k_cache, case.v_cache, headroom=1.5)
    k8, v8 = quantized(case, scales)
    expected = cascade_decode(case.q, k8, v8, case.batch, 128**-0.5, scales)
    for splits in (None, 1, 7):  # None: the backend's own choice for this GPU
        backend = make_attention_backend("triton", page_size=page_size, num_splits=splits)
        out = backend.decode(case.q, k8, v8, case.batch, 128**-0.5, scales)
        real = case.real_rows
        torch.testing.assert_close(out[real].float(), expected[real].float(), **tolerance(dtype))
        assert (out[~real] == 0).all()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_fp8_prefill_serving_shapes(kernel_device: torch.device, dtype: torch.dtype) -> None:
    from widebeam.kernels.attention.triton_prefill import ragged_causal_prefill

    cu = (0, *itertools.accumulate((1000, 5000, 1, 300)))
    gen = torch.Generator(device=kernel_device).manual_seed(5)

    def rand(heads: int) -> torch.Tensor:
        x = torch.randn(cu[-1], heads, 128, generator=gen, device=kernel_device)
        return x.to(dtype)

    q, k, v = rand(16), rand(8) * 20, rand(8) / 20
    scales = fp8_scales(k, v, headroom=0.5)  # the largest values saturate
    k8, v8 = quantize_kv(k, scales.k_inv), quantize_kv(v, scales.v_inv)
    out = ragged_causal_prefill(q, k8, v8, cu, 128**-0.5, scales)
    expected = causal_prefill(q, k8, v8, cu, 128**-0.5, scales)
    assert out.isfinite().all()
    torch.testing.assert_close(out.float(), expected.float(), **tolerance(dtype))
    # widened once before the kernel (the default) or in its loop: the same bits
    assert torch.equal(ragged_causal_prefill(q, k8, v8, cu, 128**-0.5, scales, widen_kv=False), out)


def test_fp8_write_stores_the_reference_bytes(kernel_device: torch.device) -> None:
    from widebeam.kernels.kv.triton_kv_write import write_kv_triton

    gen = torch.Generator(device=kernel_device).manual_seed(2)
    rows, slots_total = 5000, 6000
    fused = torch.randn(rows, 48 * 128, generator=gen, device=kernel_device).to(torch.bfloat16)
    fused[:, 16 * 128 :] *= torch.logspace(-5, 3, rows, device=kernel_device)[:, None].to(
        torch.bfloat16
    )  # tiny values (subnormal in e4m3) up to far past the range
    k = fused[:, 16 * 128 : 24 * 128].view(rows, 8, 128)
    v = fused[:, 24 * 128 : 32 * 128].view(rows, 8, 128)
    scales = fp8_scales(k, v, headroom=1e-3)  # the largest saturate, the smallest subnormal
    slots = torch.randperm(slots_total, device=kernel_device)[:rows]
    caches = []
    for write in (write_kv_triton, write_kv_ref):
        cache = torch.zeros(2, slots_total, 8, 128, dtype=KV_FP8_DTYPE, device=kernel_device)
        write(cache[0], cache[1], slots, k, v, scales)
        caches.append(cache.view(torch.uint8))
    assert torch.equal(caches[0], caches[1])


def test_fp8_decode_replays_in_a_cuda_graph(kernel_device: torch.device) -> None:
    """Static packed buffers, static scales, static output: capture once, rewrite the cache and
    q in place, replay."""
    from widebeam.kernels.attention.triton_cascade import cascade_decode_packed

    case = decode_case(
        [(256, 1000, 3), (64, 200, 2)], q_heads=16, kv_heads=8, dim=128,
        dtype=torch.bfloat16, device=kernel_device, seed=9, pad_rows=5, page_size=16,
    )  # fmt: skip
    scales = fp8_scales(case.k_cache, case.v_cache)
    k8, v8 = quantized(case, scales)
    rows = case.q.shape[0]
    packed = pack_decode(case.batch, rows, block_rows=32, num_splits=4, page_size=16)
    q, out = case.q.clone(), torch.empty_like(case.q)
    cascade_decode_packed(q, k8, v8, packed, 0.1, scales, out=out)  # compile
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        cascade_decode_packed(q, k8, v8, packed, 0.1, scales, out=out)
    q.copy_(torch.randn_like(q))
    k8.copy_(quantize_kv(case.k_cache * 0.5, scales.k_inv))  # the unused slots stay NaN
    graph.replay()
    expected = cascade_decode(q, k8, v8, case.batch, 0.1, scales)
    real = case.real_rows
    torch.testing.assert_close(out[real].float(), expected[real].float(), **tolerance(q.dtype))
