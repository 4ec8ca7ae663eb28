"""The backends' metadata and CUDA-graph hooks (what the runner calls instead of knowing a backend
by name): buckets hold their batches, static buffers refilled by a replay's copy give exactly
what the step's own metadata gives, and the torch reference has no graph hooks."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from tests.kernels.attention.cases import decode_case, reparented, tolerance, uniform_batch
from widebeam.kernels.attention.metadata import (
    AttentionLayout,
    PrefillBatch,
)
from widebeam.kernels.attention.torch_ref import TorchAttention, cascade_decode
from widebeam.services.decoder.runner.prefill_graphs import padded_segments, prefill_shape


def _layout(
    q_heads: int, kv_heads: int, dim: int, dtype: torch.dtype, device: torch.device
) -> AttentionLayout:
    return AttentionLayout(q_heads, kv_heads, dim, dtype, dtype, 1 / math.sqrt(dim), device)


def _padded(q: torch.Tensor, rows: int) -> torch.Tensor:  # [r, H, D] -> [rows, H, D] zeros
    out = torch.zeros((rows, *q.shape[1:]), dtype=q.dtype, device=q.device)
    out[: q.shape[0]] = q
    return out


def test_the_torch_reference_runs_eager_steps_only() -> None:
    backend = TorchAttention()
    layout = _layout(4, 2, 8, torch.float32, torch.device("cpu"))
    batch = uniform_batch([2], prompt=3, suffix=1)
    assert not backend.supports_graphs(torch.device("cpu"))
    assert not backend.supports_graphs(torch.device("cuda"))
    assert backend.prepare_decode(batch, 2, layout) is batch
    prefill = PrefillBatch((0, 3))
    assert backend.prepare_prefill(prefill, layout) is prefill
    with pytest.raises(NotImplementedError, match="'torch' attention backend"):
        backend.prepare_decode(batch, 8, layout, bucket=(1,))
    with pytest.raises(NotImplementedError):
        backend.decode_bucket(batch, 8, layout)
    with pytest.raises(NotImplementedError):
        backend.init_decode_capture(batch, layout)


def test_triton_decode_bucket_holds_theuniform_batch() -> None:
    from widebeam.kernels.attention.factory import make_attention_backend
    from widebeam.kernels.attention.triton_backend import TritonDecodeBucket

    backend = make_attention_backend("triton", page_size=16)
    assert backend.supports_graphs(torch.device("cuda"))
    assert not backend.supports_graphs(torch.device("cpu"))
    layout = replace(_layout(16, 8, 128, torch.bfloat16, torch.device("cpu")), cache_slots=16000)
    batch = uniform_batch([5, 256, 1, 33], prompt=1000, suffix=3)
    bucket = backend.decode_bucket(batch, 512, layout)
    # 32-row prefix blocks (M = 32 rows x GQA 2): 12 items, in the first rung (512 / 32); a
    # group per row at most; 8 suffix slots; the table as many entries as the cache has pages;
    # one split on the CPU
    assert bucket == TritonDecodeBucket(
        groups=512, work=16, suffix=8, table=1000, block_rows=32, splits=1
    )
    # the same bucket for other requests and prompts: one graph serves both
    assert backend.decode_bucket(uniform_batch([7, 250, 2, 30], 1500, 5), 512, layout) == bucket
    assert backend.decode_bucket(uniform_batch([500], 10, 1), 512, layout) == bucket
    # and it is on the start-up list, with the rungs of more work items
    listed = backend.decode_buckets(512, layout)
    assert [b.work for b in listed] == [16, 32, 512] and bucket in listed
    narrow = backend.decode_bucket(uniform_batch([1] * 40, 100, 2), 512, layout)
    assert narrow in listed and narrow.work == 512
    # prompts listing more entries than the cache has pages (shared prefixes): a larger table
    shared = backend.decode_bucket(uniform_batch([2] * 200, 100, 2), 512, layout)
    assert shared.table == 2048 and shared not in listed
    # a longer generation: a larger suffix bucket, met when first run
    assert backend.decode_bucket(uniform_batch([64], 100, 9), 512, layout).suffix == 16


def test_fp8_queries_take_wide_prefix_items_where_they_fill_the_gpu() -> None:
    """FP8 queries over an FP8 cache: a bucket whose rows make a program per SM in items of
    PREFIX_WIDE_M queries takes those items; smaller buckets, FP8 keys without FP8 queries, bf16
    caches and a machine without SMs keep PREFIX_MAX_M. The start-up list and serving agree (one
    block size per bucket: no graph more), and eager packing follows the same rule."""
    from widebeam.kernels.attention.factory import make_attention_backend
    from widebeam.kernels.attention.triton_backend import TritonAttention
    from widebeam.kernels.kv.fp8_kv import KV_FP8_DTYPE

    cpu = torch.device("cpu")
    bf16 = replace(_layout(16, 8, 128, torch.bfloat16, cpu), cache_slots=400_000)
    fp8 = replace(bf16, kv_dtype=KV_FP8_DTYPE)
    queries = make_attention_backend("triton", page_size=16, fp8_queries=True)
    keys_only = make_attention_backend("triton", page_size=16)
    assert isinstance(queries, TritonAttention) and isinstance(keys_only, TritonAttention)
    queries.sms = keys_only.sms = 132  # an H100's
    # GQA 2: M = 64 is 32 rows an item, M = 128 is 64; 1,024 rows make 16 wide items x 8 KV
    # heads = 128 programs (< 132 SMs), 1,536 make 192
    for backend, rows, layout, block_rows in [
        (queries, 1024, fp8, 32), (queries, 1536, fp8, 64), (queries, 8192, fp8, 64),
        (queries, 8192, bf16, 32), (keys_only, 8192, fp8, 32),
    ]:  # fmt: skip
        listed = backend.decode_buckets(rows, layout)
        assert {b.block_rows for b in listed} == {block_rows}, (rows, layout.kv_dtype)
        batch = uniform_batch([50] * (rows // 50), prompt=301, suffix=2)
        assert backend.decode_bucket(batch, rows, layout) in listed
    assert [b.work for b in queries.decode_buckets(1536, fp8)] == [24, 48, 1536]
    # eager: the batch's own rows decide, only for a step that multiplies FP8 queries
    wide = uniform_batch([1000] * 2, 64, 2)
    assert queries.pack(wide, 2000, 16, 8, fp8_queries=True).block_rows == 64
    assert queries.pack(wide, 2000, 16, 8).block_rows == 32
    assert queries.prepare_decode(wide, 2000, fp8).block_rows == 64
    assert queries.prepare_decode(wide, 2000, bf16).block_rows == 32
    assert queries.pack(uniform_batch([256] * 4, 64, 2), 1024, 16, 8, True).block_rows == 32
    # narrow requests keep their narrow items whatever the batch's width
    assert queries.pack(uniform_batch([8] * 300, 64, 2), 2400, 16, 8, True).block_rows == 8
    queries.sms = None  # the cache device's: none on the CPU
    assert {b.block_rows for b in queries.decode_buckets(8192, fp8)} == {32}


def test_work_rungs() -> None:
    from widebeam.kernels.attention.triton_backend import work_rungs

    assert work_rungs(6144, 32) == (192, 384, 6144)
    assert work_rungs(8, 8) == (1, 2, 8)
    assert work_rungs(2, 8) == (1, 2)
    assert work_rungs(1, 8) == (1,)


def test_triton_prefill_bucket_holds_every_block() -> None:
    from widebeam.kernels.attention.factory import make_attention_backend

    backend = make_attention_backend("triton")
    layout = _layout(4, 2, 32, torch.float32, torch.device("cpu"))  # 32-token query blocks
    for lengths in ([1], [1000], [301] * 27, [256], [5000], [7, 9, 1]):
        shape = prefill_shape(
            lengths, lambda tokens, prompts: backend.prefill_bucket(tokens, prompts, layout)
        )
        blocks = sum(-(-n // 32) for n in [*lengths, shape.tokens - sum(lengths)])
        assert shape.attention.work >= blocks


def test_triton_prefill_replays_from_a_static_work_list(kernel_device: torch.device) -> None:
    """A bucket's work list: the batch's query blocks, the padding segment's, then padding
    items; copied into the static buffer it prefills exactly what the eager batch prefills."""
    from widebeam.kernels.attention import triton_prefill
    from widebeam.kernels.attention.factory import make_attention_backend
    from widebeam.kernels.attention.metadata import PackedPrefill

    backend = make_attention_backend("triton")
    layout = _layout(4, 2, 32, torch.float32, kernel_device)
    lengths = [3, 2]
    shape = prefill_shape(
        lengths, lambda tokens, prompts: backend.prefill_bucket(tokens, prompts, layout)
    )
    cu = padded_segments(lengths, shape.tokens)
    metadata = backend.prepare_prefill(PrefillBatch(cu), layout, shape.attention)
    assert isinstance(metadata, PackedPrefill)
    work = metadata.work
    items = work[:, work[1] > 0].t().tolist()  # (segment start, end, first query) per block
    padding = [[5, shape.tokens, q] for q in range(5, shape.tokens, 32)]
    assert sorted(items) == sorted([[0, 3, 0], [3, 5, 3], *padding])
    if triton_prefill.HEAVY_FIRST:  # the blocks that read the most keys first
        keys = [q - start for start, _, q in items]
        assert keys == sorted(keys, reverse=True)
    assert (work[:, len(items) :] == 0).all()
    static = backend.init_prefill_capture(metadata, layout)
    assert isinstance(static, PackedPrefill) and not static.work.any()  # warm-up: no blocks
    backend.prepare_prefill_replay(static, metadata)
    gen = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(shape.tokens, h, 32, generator=gen).to(kernel_device) for h in (4, 2, 2))
    got = backend.prefill(q, k, v, static, 0.2)
    want = backend.prefill(q, k, v, PrefillBatch(cu), 0.2)
    assert torch.equal(got, want)


def test_triton_eager_metadata_is_the_decode_packing(kernel_device: torch.device) -> None:
    from widebeam.kernels.attention.factory import make_attention_backend

    backend = make_attention_backend("triton", page_size=4)
    case = decode_case(
        [(4, 21, 2), (1, 5, 2)], q_heads=4, kv_heads=2, dim=32, dtype=torch.float32,
        device=kernel_device, seed=3, page_size=4,
    )  # fmt: skip
    layout = _layout(4, 2, 32, torch.float32, kernel_device)
    rows = case.q.shape[0]
    metadata = backend.prepare_decode(case.batch, rows, layout)
    assert metadata is backend.pack(case.batch, rows, 4, 2)  # type: ignore[attr-defined]
    got = backend.decode(case.q, case.k_cache, case.v_cache, metadata, 0.2)
    want = backend.decode(case.q, case.k_cache, case.v_cache, case.batch, 0.2)
    assert torch.equal(got, want)


def test_triton_decode_replays_from_static_buffers(kernel_device: torch.device) -> None:
    """Two batches of one bucket: the buffers built from the first step's metadata, refilled
    with the second's, decode exactly what the second's own metadata decodes."""
    from widebeam.kernels.attention.factory import make_attention_backend

    backend = make_attention_backend("triton", page_size=4)
    layout = _layout(4, 2, 32, torch.float32, kernel_device)
    cases = [
        decode_case(
            groups,
            q_heads=4,
            kv_heads=2,
            dim=32,
            dtype=torch.float32,
            device=kernel_device,
            seed=seed,
            pad_rows=1,
            page_size=4,
        )
        for seed, groups in enumerate([[(4, 21, 2), (1, 5, 2)], [(3, 17, 2), (2, 9, 1)]])
    ]
    rows = 16  # the runner's row bucket for these 8-row steps
    bucket = backend.decode_bucket(cases[0].batch, rows, layout)
    assert backend.decode_bucket(cases[1].batch, rows, layout) == bucket
    first, second = (backend.prepare_decode(c.batch, rows, layout, bucket) for c in cases)
    static = backend.init_decode_capture(first, layout)
    assert torch.equal(static.row_group, first.row_group)  # type: ignore[attr-defined]
    assert not torch.equal(first.row_group, second.row_group)  # type: ignore[attr-defined]
    backend.prepare_decode_replay(static, second)
    case = cases[1]
    q = _padded(case.q, rows)
    got = backend.decode(q, case.k_cache, case.v_cache, static, 0.2)
    assert torch.equal(got, backend.decode(q, case.k_cache, case.v_cache, second, 0.2))
    expected = cascade_decode(case.q, case.k_cache, case.v_cache, case.batch, 0.2)
    real = case.real_rows
    n = case.q.shape[0]
    torch.testing.assert_close(got[:n][real], expected[real], **tolerance(torch.float32))
    assert (got[:n][~real] == 0).all() and (got[n:] == 0).all()  # padding rows attend to nothing


@pytest.mark.gpu
def test_triton_decode_replays_through_the_hooks_in_a_cuda_graph() -> None:
    """Captured once from the first step's buffers; a re-parented step copied in and replayed
    decodes what the reference decodes for it."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from widebeam.kernels.attention.factory import make_attention_backend
    from widebeam.services.decoder.runner.graph_capture import capture

    device = torch.device("cuda")
    case = decode_case(
        [(256, 1000, 3), (64, 200, 2)], q_heads=16, kv_heads=8, dim=128,
        dtype=torch.bfloat16, device=device, seed=9, page_size=16,
    )  # fmt: skip
    backend = make_attention_backend("triton", page_size=16)
    layout = _layout(16, 8, 128, torch.bfloat16, device)
    rows = 512
    bucket = backend.decode_bucket(case.batch, rows, layout)
    static = backend.init_decode_capture(
        backend.prepare_decode(case.batch, rows, layout, bucket), layout
    )
    q = _padded(case.q, rows)
    graph, out = capture(
        lambda: backend.decode(q, case.k_cache, case.v_cache, static, 0.1),
        device,
        torch.cuda.graph_pool_handle(),
    )
    other = reparented(case.batch)
    assert backend.decode_bucket(other, rows, layout) == bucket
    backend.prepare_decode_replay(static, backend.prepare_decode(other, rows, layout, bucket))
    q2 = torch.randn_like(case.q)
    q[: q2.shape[0]].copy_(q2)
    graph.replay()
    expected = cascade_decode(q2, case.k_cache, case.v_cache, other, 0.1)
    n = q2.shape[0]
    torch.testing.assert_close(out[:n].float(), expected.float(), **tolerance(torch.bfloat16))
    assert (out[n:] == 0).all()
