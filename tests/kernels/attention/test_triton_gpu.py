"""Triton attention at serving shapes (Qwen3: Hq 16, Hkv 8, head_dim 128) on a CUDA device."""

from __future__ import annotations

import itertools

import pytest
import torch

from tests.kernels.attention.cases import decode_case, tolerance
from widebeam.kernels.attention.packed import pack_decode
from widebeam.kernels.attention.torch_ref import cascade_decode, causal_prefill

pytestmark = pytest.mark.gpu

DECODE = {  # id: (groups as (rows, prompt_len, suffix_len), dtype, page_size)
    "beam256-prompt1000": ([(256, 1000, 3)], torch.bfloat16, 16),
    "beam256-prompt5000": ([(256, 5000, 3)], torch.bfloat16, 16),
    "beam5000-prompt64-suffix128": ([(5000, 64, 128)], torch.bfloat16, 16),
    "ragged-bf16": ([(256, 1000, 3), (1, 5000, 17), (50, 300, 128), (7, 1, 1)], torch.bfloat16, 1),
    "ragged-fp32": ([(256, 1000, 3), (1, 5000, 17), (50, 300, 128), (7, 1, 1)], torch.float32, 16),
}


@pytest.mark.parametrize("name", list(DECODE))
def test_decode_serving_shapes(kernel_device: torch.device, name: str) -> None:
    from widebeam.kernels.attention.factory import make_attention_backend

    groups, dtype, page_size = DECODE[name]
    case = decode_case(
        groups, q_heads=16, kv_heads=8, dim=128, dtype=dtype, device=kernel_device,
        seed=list(DECODE).index(name), pad_rows=3, page_size=page_size,
    )  # fmt: skip
    expected = cascade_decode(case.q, case.k_cache, case.v_cache, case.batch, 128**-0.5)
    for splits in (None, 1, 7):  # None: the backend's own choice for this GPU
        backend = make_attention_backend("triton", page_size=page_size, num_splits=splits)
        out = backend.decode(case.q, case.k_cache, case.v_cache, case.batch, 128**-0.5)
        real = case.real_rows
        torch.testing.assert_close(out[real].float(), expected[real].float(), **tolerance(dtype))
        assert (out[~real] == 0).all()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_prefill_serving_shapes(kernel_device: torch.device, dtype: torch.dtype) -> None:
    from widebeam.kernels.attention.triton_prefill import ragged_causal_prefill

    cu = (0, *itertools.accumulate((1000, 5000, 1, 300)))
    gen = torch.Generator(device=kernel_device).manual_seed(5)

    def rand(heads: int) -> torch.Tensor:
        x = torch.randn(cu[-1], heads, 128, generator=gen, device=kernel_device)
        return x.to(dtype)

    q, k, v = rand(16), rand(8), rand(8)
    out = ragged_causal_prefill(q, k, v, cu, 128**-0.5)
    expected = causal_prefill(q, k, v, cu, 128**-0.5)
    torch.testing.assert_close(out.float(), expected.float(), **tolerance(dtype))


def test_decode_replays_in_a_cuda_graph(kernel_device: torch.device) -> None:
    """Static packed buffers + static output: capture once, change q in place, replay."""
    from widebeam.kernels.attention.triton_cascade import cascade_decode_packed

    case = decode_case(
        [(256, 1000, 3), (64, 200, 2)], q_heads=16, kv_heads=8, dim=128,
        dtype=torch.bfloat16, device=kernel_device, seed=9, pad_rows=5, page_size=16,
    )  # fmt: skip
    rows = case.q.shape[0]
    packed = pack_decode(case.batch, rows, block_rows=32, num_splits=4, page_size=16)
    q, out = case.q.clone(), torch.empty_like(case.q)
    cascade_decode_packed(q, case.k_cache, case.v_cache, packed, 0.1, out=out)  # compile
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        cascade_decode_packed(q, case.k_cache, case.v_cache, packed, 0.1, out=out)
    q.copy_(torch.randn_like(q))
    graph.replay()
    expected = cascade_decode(q, case.k_cache, case.v_cache, case.batch, 0.1)
    real = case.real_rows
    torch.testing.assert_close(out[real].float(), expected[real].float(), **tolerance(q.dtype))


SUFFIX_TILES = [  # (rows_per_program, block_s, num_warps); None = the default
    (None, None, None),
    (1, None, None),
    (2, 64, 8),
    (4, 32, 4),
    (8, 8, 8),
    (16, 16, 4),
]


@pytest.mark.parametrize(("rows_per_program", "block_s", "num_warps"), SUFFIX_TILES)
def test_suffix_tiles_serving_shapes(
    kernel_device: torch.device,
    rows_per_program: int | None,
    block_s: int | None,
    num_warps: int | None,
) -> None:
    """Suffix-kernel tiles at Qwen3 shapes: blocks straddle groups of suffix 0..40, rows are no
    multiple of BLOCK_R, padding rows in between, 3 prompt splits, bucketed suffix capacity."""
    from widebeam.kernels.attention.triton_cascade import cascade_decode_packed

    groups = [(999, 64, 16), (1, 300, 5), (50, 100, 3), (7, 1, 0), (30, 0, 40), (3, 17, 1)]
    case = decode_case(
        groups, q_heads=16, kv_heads=8, dim=128, dtype=torch.bfloat16, device=kernel_device,
        seed=7, pad_rows=3, page_size=16,
    )  # fmt: skip
    rows = case.q.shape[0]
    packed = pack_decode(
        case.batch, rows, block_rows=32, num_splits=3, page_size=16, suffix_capacity=64
    )
    out = torch.full_like(case.q, float("nan"))
    cascade_decode_packed(
        case.q, case.k_cache, case.v_cache, packed, 128**-0.5, out=out,
        rows_per_program=rows_per_program, block_s=block_s, num_warps=num_warps,
    )  # fmt: skip
    expected = cascade_decode(case.q, case.k_cache, case.v_cache, case.batch, 128**-0.5)
    real = case.real_rows
    torch.testing.assert_close(out[real].float(), expected[real].float(), **tolerance(out.dtype))
    assert (out[~real] == 0).all()
