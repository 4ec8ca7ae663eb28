"""The optional FlashInfer cascade backend: a clear error without the package; its plan inputs,
padded to a CUDA-graph bucket (checked on the CPU); on a GPU with it, the same outputs as the
torch reference at serving shapes, eagerly and replayed from a CUDA graph."""

from __future__ import annotations

import pytest
import torch

from tests.kernels.attention.cases import decode_case, reparented, tolerance
from widebeam.kernels.attention.factory import make_attention_backend
from widebeam.kernels.attention.flashinfer_backend import (
    CascadeBucket,
    cascade_bucket,
    cascade_plan,
    flashinfer_available,
)
from widebeam.kernels.attention.metadata import AttentionLayout, DecodeBatch
from widebeam.kernels.attention.torch_ref import cascade_decode

DECODE = {  # id: groups as (rows, prompt_len, suffix_len)
    "beam256-prompt1000": [(256, 1000, 3)],
    "beam5000-prompt64-suffix16": [(5000, 64, 16)],
    "ragged": [(256, 1000, 3), (1, 5000, 17), (50, 300, 128), (7, 1, 1)],
}


@pytest.mark.skipif(flashinfer_available(), reason="flashinfer is installed here")
def test_missing_package_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="needs the flashinfer package"):
        make_attention_backend("flashinfer")


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(DECODE))
def test_decode_matches_reference(name: str) -> None:
    pytest.importorskip("flashinfer")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    case = decode_case(
        DECODE[name], q_heads=16, kv_heads=8, dim=128, dtype=torch.bfloat16,
        device=torch.device("cuda"), seed=list(DECODE).index(name),
    )  # fmt: skip
    backend = make_attention_backend("flashinfer")
    expected = cascade_decode(case.q, case.k_cache, case.v_cache, case.batch, 128**-0.5)
    for _ in range(2):  # the second call reuses the step's plan
        out = backend.decode(case.q, case.k_cache, case.v_cache, case.batch, 128**-0.5)
        torch.testing.assert_close(out.float(), expected.float(), **tolerance(torch.bfloat16))


@pytest.mark.gpu
def test_rows_must_be_back_to_back() -> None:
    pytest.importorskip("flashinfer")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    case = decode_case(
        [(4, 10, 2)], q_heads=16, kv_heads=8, dim=128, dtype=torch.bfloat16,
        device=torch.device("cuda"), seed=0, pad_rows=2,
    )  # fmt: skip
    with pytest.raises(ValueError, match="back to back"):
        make_attention_backend("flashinfer").decode(
            case.q, case.k_cache, case.v_cache, case.batch, 128**-0.5
        )


def _layout(device: torch.device) -> AttentionLayout:
    return AttentionLayout(16, 8, 128, torch.bfloat16, torch.bfloat16, 128**-0.5, device)


def test_cascade_plan_pads_to_its_bucket() -> None:
    """Plan inputs (pure torch, checked on the CPU): empty requests up to the capacity, then one
    request holding the padding rows; every padding request and row attends to one slot."""
    case = decode_case(
        [(3, 5, 2), (2, 3, 2)], q_heads=16, kv_heads=8, dim=8, dtype=torch.float32,
        device=torch.device("cpu"), seed=1,
    )  # fmt: skip
    groups = case.batch.groups
    eager = cascade_plan(case.batch, 5, _layout(torch.device("cpu")))
    assert eager.bucket is None
    assert [t.tolist() for t in eager.qo_indptr] == [[0, 3, 5], list(range(6))]
    assert [t.tolist() for t in eager.kv_indptr] == [[0, 5, 8], [0, 2, 4, 6, 8, 10]]
    prompts = torch.cat([g.prompt_slots for g in groups]).tolist()
    suffixes = torch.cat([g.suffix_slots.reshape(-1) for g in groups]).tolist()
    assert [t.tolist() for t in eager.kv_indices] == [prompts, suffixes]
    assert all(t.dtype == torch.int32 for t in (*eager.qo_indptr, *eager.kv_indices))

    bucket = cascade_bucket(DecodeBatch(groups[:1]), 8)  # one request: capacity 1
    assert bucket.groups == 1
    with pytest.raises(ValueError, match="do not fit"):
        cascade_plan(case.batch, 8, _layout(torch.device("cpu")), bucket)
    bucket = cascade_bucket(case.batch, 8)
    assert bucket == CascadeBucket(rows=8, groups=2, prompt_tokens=8, suffix=8)
    plan = cascade_plan(case.batch, 8, _layout(torch.device("cpu")), bucket)
    assert plan.bucket == bucket
    # level 0: the two requests, then the padding request with rows 5..7 and one slot
    assert [t.tolist() for t in plan.qo_indptr] == [[0, 3, 5, 8], list(range(9))]
    assert [t.tolist() for t in plan.kv_indptr] == [[0, 5, 8, 9], [0, 2, 4, 6, 8, 10, 11, 12, 13]]
    assert [t.tolist() for t in plan.kv_indices] == [[*prompts, 0], [*suffixes, 0, 0, 0]]
    assert [t.tolist() for t in plan.last_page_len] == [[1] * 3, [1] * 8]
    # one request in a bucket for two: an empty request (no rows), then the padding one
    one = DecodeBatch(groups[:1])
    plan = cascade_plan(one, 8, _layout(torch.device("cpu")), bucket)
    assert plan.qo_indptr[0].tolist() == [0, 3, 3, 8]
    assert plan.kv_indptr[0].tolist() == [0, 5, 6, 7]
    assert len(plan.kv_indices[0]) <= bucket.prompt_indices
    assert len(plan.kv_indices[1]) <= bucket.suffix_indices


def test_cascade_plan_needs_rows_back_to_back() -> None:
    case = decode_case(
        [(4, 10, 2)], q_heads=16, kv_heads=8, dim=8, dtype=torch.float32,
        device=torch.device("cpu"), seed=0, pad_rows=2,
    )  # fmt: skip
    layout = _layout(torch.device("cpu"))
    with pytest.raises(ValueError, match="back to back"):
        cascade_plan(case.batch, case.q.shape[0], layout)
    with pytest.raises(ValueError, match="back to back"):
        cascade_plan(case.batch, 16, layout, cascade_bucket(case.batch, 16))


@pytest.mark.gpu
def test_decode_replays_through_the_graph_hooks() -> None:
    """A bucket's CUDA-graph-mode wrapper: run eagerly on the first step's plan, captured, then
    replayed after a re-parented step's plan: both match the reference."""
    pytest.importorskip("flashinfer")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from widebeam.services.decoder.runner.graph_capture import capture

    device = torch.device("cuda")
    case = decode_case(
        [(256, 1000, 3), (7, 300, 2)], q_heads=16, kv_heads=8, dim=128, dtype=torch.bfloat16,
        device=device, seed=5,
    )  # fmt: skip
    backend = make_attention_backend("flashinfer")
    assert backend.supports_graphs(device)
    layout, rows, n = _layout(device), 512, case.q.shape[0]
    bucket = backend.decode_bucket(case.batch, rows, layout)
    static = backend.init_decode_capture(
        backend.prepare_decode(case.batch, rows, layout, bucket), layout
    )
    q = torch.zeros((rows, 16, 128), dtype=torch.bfloat16, device=device)
    q[:n] = case.q
    eager = backend.decode(q, case.k_cache, case.v_cache, static, 128**-0.5)
    expected = cascade_decode(case.q, case.k_cache, case.v_cache, case.batch, 128**-0.5)
    torch.testing.assert_close(eager[:n].float(), expected.float(), **tolerance(torch.bfloat16))

    graph, out = capture(
        lambda: backend.decode(q, case.k_cache, case.v_cache, static, 128**-0.5),
        device,
        torch.cuda.graph_pool_handle(),
    )
    other = reparented(case.batch)
    backend.prepare_decode_replay(static, backend.prepare_decode(other, rows, layout, bucket))
    q2 = torch.randn_like(case.q)
    q[:n] = q2
    graph.replay()
    expected = cascade_decode(q2, case.k_cache, case.v_cache, other, 128**-0.5)
    torch.testing.assert_close(out[:n].float(), expected.float(), **tolerance(torch.bfloat16))
