"""`TritonAttention`: the GPU backend (Triton cascade decode + ragged causal prefill).

`decode` accepts the engine's `DecodeBatch` (packed once per batch object and reused by every
layer) or a `PackedDecode` (what `prepare_decode` returns, or a CUDA-graph bucket's static
buffers); `prefill` likewise a `PrefillBatch` or a `PackedPrefill`.

CUDA-graph hooks: a decode bucket fixes the packed metadata's capacities and the kernels' grids.
It depends on the batch only through its prefix work-item count (three rungs per row bucket:
`work_rungs`) and its suffix length (a power of two, 8 at least): requests, prompt lengths and
the prompt split count fit fixed buffers (the prompt table is sized by the KV cache, the grid
launches the most splits the rung can use and the batch's own count rides in a device scalar).
So the start-up list (`decode_buckets`) holds every bucket a recommendation batch can meet. A
prefill bucket fixes the length of the query-block work list. The static buffers are tensors of
those sizes, and a replay's metadata is copied into them.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import fields
from typing import NamedTuple

import numpy as np
import torch

from widebeam.kernels.attention.base import AttentionBackend
from widebeam.kernels.attention.buckets import MIN_SUFFIX, pow2
from widebeam.kernels.attention.metadata import (
    AttentionLayout,
    DecodeBatch,
    PackedPrefill,
    PrefillBatch,
)
from widebeam.kernels.attention.packed import PackedDecode, pack_decode
from widebeam.kernels.attention.suffix_tree import (
    DEFAULT_SPLIT,
    ITEM_ROWS,
    SplitRule,
    SuffixTreePlan,
)
from widebeam.kernels.attention.triton_cascade import cascade_decode_packed
from widebeam.kernels.attention.triton_common import (
    default_num_splits,
    multiprocessors,
    prefix_block_rows,
)
from widebeam.kernels.attention.triton_prefill import (
    prefill_block_q,
    prefill_work,
    ragged_causal_prefill,
)
from widebeam.kernels.kv.fp8_kv import KV_FP8_DTYPE, KvScales

# PackedDecode's tensor fields (the plan's are copied through it), read once; annotations are
# strings or types depending on the module's `from __future__ import annotations`
DECODE_TENSOR_FIELDS: tuple[str, ...] = tuple(
    f.name for f in fields(PackedDecode) if f.type in ("torch.Tensor", torch.Tensor)
)


class TritonDecodeBucket(NamedTuple):
    """The packed metadata's capacities and tiles for one decode bucket (`pack_decode`)."""

    groups: int  # request (group) capacity
    work: int  # prefix work-item capacity (the prefix kernel's grid)
    suffix: int  # per-row generated-slot capacity
    table: int  # prompt-table entries, all groups together
    block_rows: int
    splits: int  # prompt splits launched (a batch uses up to this many)


RUNGS = 2  # work rungs of 1x and 2x the row blocks, then one rung of every row (`work_rungs`)
SPLIT_PROMPT = 1 << 30  # split choice of a bucket: as if its prompts were long


def work_rungs(rows: int, block_rows: int) -> tuple[int, ...]:
    """The work-item capacities of a decode bucket of `rows` rows, smallest first. A batch of
    requests at least block_rows wide has at most twice rows/block_rows items (each request
    wastes at most one partial block); narrower ones up to one item per row. Padding items cost
    a launch each, so the capacity follows the batch instead of always being rows."""
    base = -(-rows // block_rows)
    return tuple(sorted({base << k for k in range(RUNGS) if base << k < rows} | {rows}))


class TritonPrefillBucket(NamedTuple):
    work: int  # query-block capacity of the work list


class TritonAttention(AttentionBackend):
    name = "triton"

    def __init__(
        self,
        page_size: int = 1,
        num_splits: int | None = None,
        shared_suffix: bool = True,
        tree_split: SplitRule = DEFAULT_SPLIT,
        fp8_queries: bool = False,
        sms: int | None = None,
        fp8_probabilities: bool = False,
    ) -> None:
        """page_size > 1 packs prompts as page tables (the engine's 16-slot pages);
        num_splits None = choose per batch (or bucket) from the grid size and the longest
        prompt; shared_suffix: rows read the generated tokens they share with other beams once
        per ancestor group (`suffix_tree`) once suffixes are long enough, split by
        `tree_split`; fp8_queries: over an FP8 cache, the prefill's and the prefix kernel's
        Q K^T on FP8 tensor cores over queries rounded to FP8 (`ragged_causal_prefill`,
        `cascade_decode_packed`), the prefix kernel's in items of up to
        PREFIX_WIDE_M queries (`prefix_block_rows`); sms: the multiprocessors those items are
        sized for (None: the cache device's); fp8_probabilities: over an FP8 cache, the
        prefill's and the prefix kernel's P V on FP8 tensor cores (`fp8_probabilities.py`)."""
        self.fp8_queries = fp8_queries
        self.fp8_probabilities = fp8_probabilities
        self.sms = sms
        self.page_size = page_size
        self.num_splits = num_splits
        self.tree_rows = ITEM_ROWS if shared_suffix else 0
        self.tree_split = tree_split
        # One batch object serves every layer of a step: pack once, keyed by identity (the
        # reference keeps the object alive, so its id cannot be reused meanwhile).
        self._decode_key: tuple[DecodeBatch, int, int, int, bool] | None = None
        self._decode_packed: PackedDecode | None = None
        self._prefill_key: tuple[tuple[int, ...], int, str] | None = None
        self._prefill_work: torch.Tensor | None = None

    def pack(
        self,
        batch: DecodeBatch,
        rows: int,
        q_heads: int,
        kv_heads: int,
        fp8_queries: bool = False,  # this step's prefix kernel multiplies FP8 queries
    ) -> PackedDecode:
        key = (batch, rows, q_heads, kv_heads, fp8_queries)
        last = self._decode_key
        if last is not None and last[0] is batch and last[1:] == key[1:]:
            assert self._decode_packed is not None
            return self._decode_packed
        max_rows = max((g.num_rows for g in batch.groups), default=1)
        device = batch.groups[0].prompt_slots.device if batch.groups else torch.device("cpu")
        block_rows = prefix_block_rows(
            q_heads, kv_heads, rows, max_rows, fp8_queries, self._sms(device)
        )
        splits = self.num_splits
        if splits is None:
            items = sum(-(-g.num_rows // block_rows) for g in batch.groups)
            longest = max((int(g.prompt_slots.shape[0]) for g in batch.groups), default=0)
            splits = default_num_splits(items * kv_heads, longest, device)
        packed = pack_decode(
            batch, rows, block_rows=block_rows, num_splits=splits, page_size=self.page_size,
            tree_rows=self.tree_rows, tree_split=self.tree_split,
        )  # fmt: skip
        self._decode_key, self._decode_packed = key, packed
        return packed

    def prefill(
        self,
        q: torch.Tensor,  # [N, Hq, D]
        k: torch.Tensor,  # [N, Hkv, D]
        v: torch.Tensor,  # [N, Hkv, D]
        metadata: object,  # a PrefillBatch, or a PackedPrefill on q's device
        scale: float,
        kv_scales: KvScales | None = None,
    ) -> torch.Tensor:  # [N, Hq, D] dtype of q
        block_q = prefill_block_q(q.shape[1], k.shape[1])
        fp8_dots = self._fp8_dots(kv_scales)
        if isinstance(metadata, PackedPrefill):  # a CUDA-graph bucket's static work list
            whole = (0, q.shape[0])
            return ragged_causal_prefill(
                q, k, v, whole, scale, kv_scales, work=metadata.work, block_q=block_q, **fp8_dots
            )
        if not isinstance(metadata, PrefillBatch):
            raise TypeError(
                f"the triton backend takes a PrefillBatch or a PackedPrefill, got {type(metadata)}"
            )
        key = (metadata.cu_seqlens, block_q, str(q.device))
        if self._prefill_key != key:  # every layer of one prefill shares the work list
            self._prefill_key = key
            self._prefill_work = prefill_work(metadata.cu_seqlens, block_q, q.device)
        assert self._prefill_work is not None
        return ragged_causal_prefill(
            q, k, v, metadata.cu_seqlens, scale, kv_scales, work=self._prefill_work,
            block_q=block_q, **fp8_dots,
        )  # fmt: skip

    def decode(
        self,
        q: torch.Tensor,  # [R, Hq, D]
        k_cache: torch.Tensor,  # [slots, Hkv, D]
        v_cache: torch.Tensor,  # [slots, Hkv, D]
        metadata: object,  # a DecodeBatch, or a PackedDecode of R rows
        scale: float,
        kv_scales: KvScales | None = None,
    ) -> torch.Tensor:  # [R, Hq, D] dtype of q
        fp8_dots = self._fp8_dots(kv_scales)
        if isinstance(metadata, DecodeBatch):
            metadata = self.pack(
                metadata, q.shape[0], q.shape[1], k_cache.shape[1], fp8_dots["fp8_queries"]
            )
        if not isinstance(metadata, PackedDecode):
            raise TypeError(
                f"the triton backend takes a DecodeBatch or a PackedDecode, got {type(metadata)}"
            )
        return cascade_decode_packed(q, k_cache, v_cache, metadata, scale, kv_scales, **fp8_dots)

    # ----- metadata ---------------------------------------------------------------------------
    def prepare_prefill(
        self, batch: PrefillBatch, layout: AttentionLayout, bucket: Hashable | None = None
    ) -> PrefillBatch | PackedPrefill:
        """Eager: the batch (prefill builds its work list once per batch). With a bucket: the
        work list padded to the bucket's capacity, on the host (pinned on CUDA) until
        prepare_prefill_replay queues its copy."""
        if bucket is None:
            return batch
        if not isinstance(bucket, TritonPrefillBucket):
            raise TypeError(f"not a triton prefill bucket: {bucket!r}")
        block_q = prefill_block_q(layout.q_heads, layout.kv_heads)
        work = np.zeros((3, bucket.work), dtype=np.int32)
        items = prefill_work(batch.cu_seqlens, block_q, torch.device("cpu")).numpy()
        work[:, : items.shape[1]] = items
        host = torch.from_numpy(work)  # [3, W] int32
        return PackedPrefill(host.pin_memory() if layout.device.type == "cuda" else host)

    def prepare_decode(
        self,
        batch: DecodeBatch,
        rows: int,
        layout: AttentionLayout,
        bucket: Hashable | None = None,
    ) -> PackedDecode:
        """The batch packed on the cache's device: at its own sizes (as `decode` packs a
        DecodeBatch), or padded to a bucket's capacities."""
        if bucket is None:
            return self.pack(
                batch, rows, layout.q_heads, layout.kv_heads, self._fp8_queries(layout)
            )
        if not isinstance(bucket, TritonDecodeBucket):
            raise TypeError(f"not a triton decode bucket: {bucket!r}")
        splits = self.num_splits
        if splits is None:
            splits = self._batch_splits(batch, rows, bucket.block_rows, layout)
        return pack_decode(
            batch,
            rows,
            block_rows=bucket.block_rows,
            num_splits=min(splits, bucket.splits),
            max_splits=bucket.splits,
            page_size=self.page_size,
            device=layout.device,
            num_groups=bucket.groups,
            num_work=bucket.work,
            suffix_capacity=bucket.suffix,
            table_capacity=bucket.table,
            tree_rows=self.tree_rows,
            tree_split=self.tree_split,
        )

    # ----- CUDA-graph hooks -------------------------------------------------------------------
    def supports_graphs(self, device: torch.device) -> bool:
        return device.type == "cuda"

    def prefill_bucket(
        self, tokens: int, prompts: int, layout: AttentionLayout
    ) -> TritonPrefillBucket:
        # Each segment wastes at most one partial block.
        return TritonPrefillBucket(
            tokens // prefill_block_q(layout.q_heads, layout.kv_heads) + prompts
        )

    def decode_bucket(
        self, batch: DecodeBatch, rows: int, layout: AttentionLayout
    ) -> TritonDecodeBucket:
        block_rows = self._bucket_block_rows(rows, layout)
        items = sum(-(-g.num_rows // block_rows) for g in batch.groups)
        work = next((w for w in work_rungs(rows, block_rows) if w >= items), pow2(items))
        suffix = max((int(g.suffix_slots.shape[1]) for g in batch.groups), default=0)
        entries = sum(-(-int(g.prompt_slots.shape[0]) // self.page_size) for g in batch.groups)
        return self._bucket(
            rows, layout, block_rows, work, pow2(suffix, MIN_SUFFIX), len(batch.groups), entries
        )

    def decode_buckets(self, rows: int, layout: AttentionLayout) -> tuple[TritonDecodeBucket, ...]:
        """Every work rung of `rows` with the smallest suffix bucket (a recommendation's SID
        path); longer generations meet larger suffix buckets when first run."""
        block_rows = self._bucket_block_rows(rows, layout)
        return tuple(
            self._bucket(rows, layout, block_rows, work, MIN_SUFFIX)
            for work in work_rungs(rows, block_rows)
        )

    @staticmethod
    def _batch_splits(
        batch: DecodeBatch, rows: int, block_rows: int, layout: AttentionLayout
    ) -> int:
        """The batch's split count: the grid counted as a block per `block_rows` rows plus one
        per request, prompts as their power of two (the choice W3's shapes were tuned with:
        a 300-token prompt splits in two when the grid is small)."""
        groups = len(batch.groups)
        longest = max((int(g.prompt_slots.shape[0]) for g in batch.groups), default=0)
        programs = (rows // block_rows + pow2(groups)) * layout.kv_heads
        return default_num_splits(programs, pow2(longest), layout.device)

    def _bucket_block_rows(self, rows: int, layout: AttentionLayout) -> int:
        # From the bucket's rows, not the widest request: narrower requests in tiles this wide
        # cost a few tensor-core products more, where another block size would cost a graph.
        return prefix_block_rows(
            layout.q_heads, layout.kv_heads, rows, rows, self._fp8_queries(layout),
            self._sms(layout.device),
        )  # fmt: skip

    @property
    def prefill_takes_fp8_rows(self) -> bool:  # type: ignore[override]
        """Both dots on FP8 tensor cores: the prefill widens neither K nor V."""
        return self.fp8_queries and self.fp8_probabilities

    def _fp8_dots(self, kv_scales: KvScales | None) -> dict[str, bool]:
        """The kernels' FP8 dot options for a layer: the backend's, over an FP8 cache only."""
        fp8 = kv_scales is not None
        return {
            "fp8_queries": self.fp8_queries and fp8,
            "fp8_probabilities": self.fp8_probabilities and fp8,
        }

    def _fp8_queries(self, layout: AttentionLayout) -> bool:
        return self.fp8_queries and layout.kv_dtype == KV_FP8_DTYPE

    def _sms(self, device: torch.device) -> int:
        return multiprocessors(device) if self.sms is None else self.sms

    def _bucket(
        self,
        rows: int,
        layout: AttentionLayout,
        block_rows: int,  # _bucket_block_rows(rows, layout)
        work: int,
        suffix: int,
        groups: int = 0,
        entries: int = 0,
    ) -> TritonDecodeBucket:
        table = max(-(-layout.cache_slots // self.page_size), 1)
        if entries > table:  # prompts sharing cached pages can list more entries than exist
            table = pow2(entries)
        splits = self.num_splits
        if splits is None:  # enough for the rung's smallest batches
            programs = max(work // 2, 1) * layout.kv_heads
            splits = default_num_splits(programs, SPLIT_PROMPT, layout.device)
        return TritonDecodeBucket(max(rows, groups), work, suffix, table, block_rows, splits)

    def init_prefill_capture(self, metadata: object, layout: AttentionLayout) -> PackedPrefill:
        """An all-padding work list (a warm-up run computes nothing)."""
        if not isinstance(metadata, PackedPrefill):
            raise TypeError(f"not triton prefill metadata: {type(metadata)}")
        work = torch.zeros(metadata.work.shape, dtype=torch.int32, device=layout.device)
        return PackedPrefill(work)

    def init_decode_capture(self, metadata: object, layout: AttentionLayout) -> PackedDecode:
        """A copy of the first step's packed metadata."""
        if not isinstance(metadata, PackedDecode):
            raise TypeError(f"not triton decode metadata: {type(metadata)}")
        return PackedDecode(
            **{
                f.name: getattr(metadata, f.name).clone()
                if isinstance(getattr(metadata, f.name), torch.Tensor | SuffixTreePlan)
                else getattr(metadata, f.name)
                for f in fields(PackedDecode)
            }
        )

    def prepare_prefill_replay(self, static: object, metadata: object) -> None:
        if not isinstance(static, PackedPrefill) or not isinstance(metadata, PackedPrefill):
            raise TypeError("prepare_prefill_replay takes two PackedPrefill")
        static.work.copy_(metadata.work, non_blocking=True)

    def prepare_decode_replay(self, static: object, metadata: object) -> None:
        if not isinstance(static, PackedDecode) or not isinstance(metadata, PackedDecode):
            raise TypeError("prepare_decode_replay takes two PackedDecode")
        if (static.tree is None) != (metadata.tree is None):
            raise ValueError("a replay's metadata and the bucket's buffers differ in the plan")
        targets = [getattr(static, name) for name in DECODE_TENSOR_FIELDS]
        sources = [getattr(metadata, name) for name in DECODE_TENSOR_FIELDS]
        if static.tree is not None and metadata.tree is not None:
            mine, theirs = static.tree.replay_pairs(metadata.tree)
            targets += mine
            sources += theirs
        # One multi-tensor copy: on CUDA one launch instead of one per field (11-15).
        torch._foreach_copy_(targets, sources)
