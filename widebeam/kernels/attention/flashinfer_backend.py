"""`FlashInferAttention`: FlashInfer's two-level cascade wrapper as an optional decode backend.

Level 0 is each request's prompt (shared by all its rows, read once per request), level 1 each
row's private suffix; FlashInfer merges the two by log-sum-exp, as the Triton cascade does.
The cache is viewed as pages of one slot ([slots, 1, Hkv, D], FlashInfer's NHD layout), so the
engine's slot tables are its page tables without copies. Prefill stays on the Triton kernel
(and on its CUDA-graph hooks).

FlashInfer splits attention into `plan` (host: the work partition, from host-side index
pointers) and `run` (device kernels only). A `CascadePlan` is a step's plan inputs; eagerly it
is planned into one wrapper before the first layer runs. CUDA graphs: a bucket fixes both
levels' batch sizes (request capacity + 1, padded rows) and index-buffer lengths, and gets a
wrapper in FlashInfer's CUDA-graph mode over static buffers of those sizes
(`init_decode_capture`); before each replay the step's plan is planned into that wrapper on the
host (`prepare_decode_replay`), which copies it into the buffers the captured `run` reads.
Padding: empty requests up to the capacity, then one request holding the padding rows; each
padding request and padding row attends to one slot (slot 0), so every KV length is >= 1;
their outputs are dropped by the runner.

FP8 KV is refused (`kv_scales`): FlashInfer's kernels take one K and one V scale per layer,
where the engine's FP8 cache has one per KV head (`EngineConfig` refuses the pair at start-up).

Optional: `flashinfer` is not a dependency (the device image lacks it; `../shared/device` has
a bundle).
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable
from dataclasses import dataclass
from typing import NamedTuple

import torch

from widebeam.kernels.attention.base import AttentionBackend
from widebeam.kernels.attention.buckets import decode_capacity
from widebeam.kernels.attention.metadata import AttentionLayout, DecodeBatch, PrefillBatch
from widebeam.kernels.attention.triton_backend import TritonAttention
from widebeam.kernels.kv.fp8_kv import KvScales

WORKSPACE_BYTES = 256 << 20
PADDING_SLOT = 0  # what padding requests and rows attend to (any valid slot; outputs dropped)


def flashinfer_available() -> bool:
    try:
        import flashinfer  # noqa: F401
    except ImportError:
        return False
    return True


class CascadeBucket(NamedTuple):
    """A decode bucket's plan capacities."""

    rows: int  # level 1 batch size (padded rows)
    groups: int  # request capacity; level 0 batch size is groups + 1 (the padding request)
    prompt_tokens: int  # per-request prompt capacity
    suffix: int  # per-row suffix capacity

    @property
    def prompt_indices(self) -> int:  # level 0 index capacity: prompts + one slot per padding
        return self.groups * self.prompt_tokens + self.groups + 1

    @property
    def suffix_indices(self) -> int:  # level 1 index capacity
        return self.rows * self.suffix


@dataclass(frozen=True)
class CascadePlan:
    """One decode step's plan inputs, level 0 (prompts) then level 1 (suffixes), with
    B0 = requests (+ padding ones) and B1 = rows. Index pointers and last-page lengths live on
    the host (FlashInfer plans from host values), slot indices on the cache's device."""

    qo_indptr: tuple[torch.Tensor, torch.Tensor]  # [B0 + 1], [B1 + 1] int32 host
    kv_indptr: tuple[torch.Tensor, torch.Tensor]  # [B0 + 1], [B1 + 1] int32 host
    kv_indices: tuple[torch.Tensor, torch.Tensor]  # [prompt slots], [suffix slots] int32
    last_page_len: tuple[torch.Tensor, torch.Tensor]  # [B0], [B1] int32 host, all 1
    layout: AttentionLayout
    bucket: CascadeBucket | None  # None: at the step's own sizes (eager only)


@dataclass(frozen=True)
class CascadeGraph:
    """A bucket's static plan: a CUDA-graph-mode wrapper whose buffers the captured `run`
    reads; prepare_decode_replay plans each step into it."""

    wrapper: object  # flashinfer.MultiLevelCascadeAttentionWrapper(use_cuda_graph=True)
    bucket: CascadeBucket


def cascade_bucket(batch: DecodeBatch, rows: int) -> CascadeBucket:
    """The bucket of `batch` in `rows` rows (already rounded up by the runner)."""
    capacity = decode_capacity(batch)
    return CascadeBucket(rows, capacity.groups, capacity.prompt_tokens, capacity.suffix)


def _indptr(lengths: list[int]) -> torch.Tensor:  # [len + 1] int32 host
    return torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32)


def cascade_plan(
    batch: DecodeBatch,
    rows: int,  # the step's rows (the bucket's when bucket is given)
    layout: AttentionLayout,
    bucket: CascadeBucket | None = None,
) -> CascadePlan:
    groups = batch.groups
    group_rows = [g.num_rows for g in groups]
    starts = [0, *itertools.accumulate(group_rows)]
    real_rows = starts[-1]
    placed = zip(groups, starts[:-1], strict=True)
    if any(g.row_start != start for g, start in placed) or real_rows > rows:
        raise ValueError("the flashinfer backend needs the groups' rows back to back")
    if bucket is None and real_rows != rows:
        raise ValueError("the flashinfer backend needs the groups' rows back to back")
    prompt_lens = [int(g.prompt_slots.shape[0]) for g in groups]
    suffix_lens = [int(g.suffix_slots.shape[1]) for g in groups for _ in range(g.num_rows)]
    prompt_slots = [g.prompt_slots for g in groups]
    suffix_slots = [g.suffix_slots.reshape(-1) for g in groups]
    if bucket is not None:
        if rows != bucket.rows or len(groups) > bucket.groups:
            raise ValueError(f"{len(groups)} requests in {rows} rows do not fit {bucket}")
        padding_groups = bucket.groups - len(groups) + 1  # the last holds the padding rows
        padding_rows = rows - real_rows
        group_rows += [0] * (padding_groups - 1) + [padding_rows]
        prompt_lens += [1] * padding_groups
        suffix_lens += [1] * padding_rows

        def padding(n: int) -> torch.Tensor:  # [n] int64
            return torch.full((n,), PADDING_SLOT, dtype=torch.int64, device=layout.device)

        prompt_slots.append(padding(padding_groups))
        suffix_slots.append(padding(padding_rows))
        if sum(prompt_lens) > bucket.prompt_indices or sum(suffix_lens) > bucket.suffix_indices:
            raise ValueError(f"the batch's slots do not fit {bucket}")
    num_b0, num_b1 = len(group_rows), len(suffix_lens)
    return CascadePlan(
        qo_indptr=(_indptr(group_rows), _indptr([1] * num_b1)),
        kv_indptr=(_indptr(prompt_lens), _indptr(suffix_lens)),
        kv_indices=(
            torch.cat(prompt_slots).to(torch.int32),
            torch.cat(suffix_slots).to(torch.int32),
        ),
        last_page_len=(
            torch.ones(num_b0, dtype=torch.int32),
            torch.ones(num_b1, dtype=torch.int32),
        ),
        layout=layout,
        bucket=bucket,
    )


def _refuse_fp8(kv_scales: KvScales | None) -> None:
    if kv_scales is not None:
        raise ValueError(
            "the flashinfer attention backend does not read an FP8 KV cache (its kernels take "
            "one scale per layer, the cache has one per KV head): use triton"
        )


class FlashInferAttention(AttentionBackend):
    name = "flashinfer"

    def __init__(self, workspace_bytes: int = WORKSPACE_BYTES) -> None:
        try:
            import flashinfer
        except ImportError as exc:
            raise ValueError(
                "attention backend 'flashinfer' needs the flashinfer package "
                "(pip install flashinfer-python); use 'triton' or 'auto' instead"
            ) from exc
        self._flashinfer = flashinfer
        self.workspace_bytes = workspace_bytes
        self._workspace: torch.Tensor | None = None  # [bytes] uint8, shared by every wrapper
        self._wrapper: object | None = None  # the eager wrapper
        self._planned: CascadePlan | None = None  # one plan serves every layer of a step
        self._batch_plan: tuple[DecodeBatch, CascadePlan] | None = None
        self._last_plan: torch.cuda.Event | None = None
        self._prefill = TritonAttention(page_size=1)

    # ----- prefill: the Triton kernel and its hooks ---------------------------------------------
    def prefill(
        self,
        q: torch.Tensor,  # [N, Hq, D]
        k: torch.Tensor,  # [N, Hkv, D]
        v: torch.Tensor,  # [N, Hkv, D]
        metadata: object,  # the Triton backend's prefill metadata
        scale: float,
        kv_scales: KvScales | None = None,
    ) -> torch.Tensor:  # [N, Hq, D] dtype of q
        _refuse_fp8(kv_scales)
        return self._prefill.prefill(q, k, v, metadata, scale)

    def prepare_prefill(
        self, batch: PrefillBatch, layout: AttentionLayout, bucket: Hashable | None = None
    ) -> object:
        return self._prefill.prepare_prefill(batch, layout, bucket)

    def prefill_bucket(self, tokens: int, prompts: int, layout: AttentionLayout) -> Hashable:
        return self._prefill.prefill_bucket(tokens, prompts, layout)

    def init_prefill_capture(self, metadata: object, layout: AttentionLayout) -> object:
        return self._prefill.init_prefill_capture(metadata, layout)

    def prepare_prefill_replay(self, static: object, metadata: object) -> None:
        self._prefill.prepare_prefill_replay(static, metadata)

    # ----- decode -------------------------------------------------------------------------------
    def decode(
        self,
        q: torch.Tensor,  # [R, Hq, D]
        k_cache: torch.Tensor,  # [slots, Hkv, D]
        v_cache: torch.Tensor,  # [slots, Hkv, D]
        metadata: object,  # a DecodeBatch, a CascadePlan of R rows, or a CascadeGraph
        scale: float,
        kv_scales: KvScales | None = None,
    ) -> torch.Tensor:  # [R, Hq, D] dtype of q
        _refuse_fp8(kv_scales)
        if isinstance(metadata, CascadeGraph):  # planned by init / prepare_decode_replay
            wrapper = metadata.wrapper
        else:
            if isinstance(metadata, DecodeBatch):
                metadata = self._plan_of_batch(metadata, q, k_cache, scale)
            if not isinstance(metadata, CascadePlan):
                raise TypeError(
                    "the flashinfer backend takes a DecodeBatch, a CascadePlan or a "
                    f"CascadeGraph, got {type(metadata)}"
                )
            wrapper = self._eager_wrapper(q.device)
            if self._planned is not metadata:
                self._plan(wrapper, metadata)
                self._planned = metadata
        pages = (k_cache.unsqueeze(1), v_cache.unsqueeze(1))  # [slots, 1, Hkv, D] views
        return wrapper.run(q, pages)  # type: ignore[attr-defined]

    def prepare_decode(
        self,
        batch: DecodeBatch,
        rows: int,
        layout: AttentionLayout,
        bucket: Hashable | None = None,
    ) -> CascadePlan:
        if bucket is not None and not isinstance(bucket, CascadeBucket):
            raise TypeError(f"not a flashinfer decode bucket: {bucket!r}")
        return cascade_plan(batch, rows, layout, bucket)

    # ----- CUDA-graph hooks (decode) ------------------------------------------------------------
    def supports_graphs(self, device: torch.device) -> bool:
        return device.type == "cuda"

    def decode_bucket(
        self, batch: DecodeBatch, rows: int, layout: AttentionLayout
    ) -> CascadeBucket:
        return cascade_bucket(batch, rows)

    def init_decode_capture(self, metadata: object, layout: AttentionLayout) -> CascadeGraph:
        """A CUDA-graph-mode wrapper over static buffers of the plan's bucket, planned with
        the plan (the capture's warm-up and capture runs need a valid plan)."""
        if not isinstance(metadata, CascadePlan) or metadata.bucket is None:
            raise TypeError("init_decode_capture takes a CascadePlan prepared for a bucket")
        bucket, device = metadata.bucket, layout.device

        def buffer(n: int) -> torch.Tensor:  # [n] int32
            return torch.zeros(n, dtype=torch.int32, device=device)

        batch_0, batch_1 = bucket.groups + 1, bucket.rows
        wrapper = self._flashinfer.MultiLevelCascadeAttentionWrapper(
            2,
            self._workspace_on(device),
            "NHD",
            use_cuda_graph=True,
            qo_indptr_buf_arr=[buffer(batch_0 + 1), buffer(batch_1 + 1)],
            paged_kv_indptr_buf_arr=[buffer(batch_0 + 1), buffer(batch_1 + 1)],
            paged_kv_indices_buf_arr=[buffer(bucket.prompt_indices), buffer(bucket.suffix_indices)],
            paged_kv_last_page_len_buf_arr=[buffer(batch_0), buffer(batch_1)],
        )
        self._plan(wrapper, metadata)
        return CascadeGraph(wrapper, bucket)

    def prepare_decode_replay(self, static: object, metadata: object) -> None:
        if not isinstance(static, CascadeGraph) or not isinstance(metadata, CascadePlan):
            raise TypeError("prepare_decode_replay takes a CascadeGraph and a CascadePlan")
        if metadata.bucket != static.bucket:
            raise ValueError(f"a plan for {metadata.bucket} replayed in {static.bucket}")
        self._plan(static.wrapper, metadata)

    # ----- internals ----------------------------------------------------------------------------
    def _plan_of_batch(
        self, batch: DecodeBatch, q: torch.Tensor, k_cache: torch.Tensor, scale: float
    ) -> CascadePlan:
        """A DecodeBatch handed to decode directly: planned once per batch object."""
        if self._batch_plan is None or self._batch_plan[0] is not batch:
            layout = AttentionLayout(
                q_heads=q.shape[1],
                kv_heads=k_cache.shape[1],
                head_dim=q.shape[2],
                q_dtype=q.dtype,
                kv_dtype=k_cache.dtype,
                scale=scale,
                device=q.device,
            )
            self._batch_plan = (batch, cascade_plan(batch, q.shape[0], layout))
        return self._batch_plan[1]

    def _workspace_on(self, device: torch.device) -> torch.Tensor:
        if self._workspace is None:
            self._workspace = torch.empty(self.workspace_bytes, dtype=torch.uint8, device=device)
        return self._workspace

    def _eager_wrapper(self, device: torch.device) -> object:
        if self._wrapper is None:
            workspace = self._workspace_on(device)
            self._wrapper = self._flashinfer.MultiLevelCascadeAttentionWrapper(2, workspace, "NHD")
        return self._wrapper

    def _plan(self, wrapper: object, plan: CascadePlan) -> None:
        """Plan on the host (never inside a capture). FlashInfer stages each plan in pinned
        host memory and queues its copy to the device; the next plan rewrites that memory, so
        it first waits until the previous plan's copy has run."""
        if self._last_plan is not None:
            self._last_plan.synchronize()
        layout = plan.layout
        wrapper.plan(  # type: ignore[attr-defined]
            list(plan.qo_indptr),
            list(plan.kv_indptr),
            list(plan.kv_indices),
            list(plan.last_page_len),
            layout.q_heads,
            layout.kv_heads,
            layout.head_dim,
            1,  # page size: one slot
            sm_scale=layout.scale,
            q_data_type=layout.q_dtype,
            kv_data_type=layout.kv_dtype,
        )
        done = torch.cuda.Event()
        done.record(torch.cuda.current_stream(layout.device))
        self._last_plan = done
