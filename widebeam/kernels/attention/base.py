"""The attention backend interface: prefill over ragged prompts, cascade decode over slots, and
the hooks through which the model runner prepares a batch's metadata and captures CUDA graphs.

Eager steps: the runner calls `prepare_prefill` / `prepare_decode` once per batch and hands
the result to every layer's `prefill` / `decode` (the default metadata is the batch itself).

Graph steps, when `supports_graphs(device)`: the runner pads a step to a bucket — it rounds the
rows (decode) or the tokens and prompts (prefill) itself and asks the backend for the rest of
the key (`decode_bucket` / `prefill_bucket`: the metadata capacities). It builds the step's
metadata for that bucket with the same `prepare_*` hook (host work, done ahead of the launch;
the result may live on the host, staged for a copy), asks once per bucket for static buffers
(`init_*_capture`, before capturing) and copies every step's metadata into them before the
replay (`prepare_*_replay`). The kernels of a captured step read only those static buffers, so
`prefill` / `decode` must accept them and must not read the device from the host. Eager padded
steps (graphs switched off) run the same path without the capture.

FP8 KV (`widebeam/kernels/kv/fp8_kv.py`): `prefill` and `decode` then take K and V in float8_e4m3fn
with the layer's `KvScales`, and attend over the stored values times their head's scale,
accumulating in fp32 as ever (a prefill's fresh K and V arrive as the cache holds them, so a
prompt's tokens see the same keys whether prefilled now or read from cached pages). A backend
that cannot read FP8 KV refuses it with a ValueError.

The runner never branches on a backend's `name`; the factory and logs use it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable

import torch

from widebeam.kernels.attention.metadata import AttentionLayout, DecodeBatch, PrefillBatch
from widebeam.kernels.kv.fp8_kv import KvScales


class AttentionBackend(ABC):
    name: str = "base"
    # An FP8 cache's prefill: K and V handed over as the FP8 values themselves (the kernels
    # multiply them as stored), else widened to the model dtype by the KV write
    prefill_takes_fp8_rows: bool = False

    @abstractmethod
    def prefill(
        self,
        q: torch.Tensor,  # [N, q_heads, head_dim]
        k: torch.Tensor,  # [N, kv_heads, head_dim]
        v: torch.Tensor,  # [N, kv_heads, head_dim]
        metadata: object,  # a PrefillBatch, what prepare_prefill returned, or static buffers
        scale: float,
        kv_scales: KvScales | None = None,  # k, v: FP8 values (stored or widened) of these
    ) -> torch.Tensor:  # [N, q_heads, head_dim], dtype of q
        """Causal attention within each prompt segment."""

    @abstractmethod
    def decode(
        self,
        q: torch.Tensor,  # [R, q_heads, head_dim]
        k_cache: torch.Tensor,  # [slots, kv_heads, head_dim] one layer
        v_cache: torch.Tensor,  # [slots, kv_heads, head_dim] one layer
        metadata: object,  # a DecodeBatch, what prepare_decode returned, or static buffers
        scale: float,
        kv_scales: KvScales | None = None,  # an FP8 cache's scales
    ) -> torch.Tensor:  # [R, q_heads, head_dim], dtype of q
        """Each row attends to its request's prompt KV and its own suffix slots."""

    # ----- metadata (eager and graph steps) ---------------------------------------------------
    def prepare_prefill(
        self, batch: PrefillBatch, layout: AttentionLayout, bucket: Hashable | None = None
    ) -> object:
        """The batch's metadata, read by every layer; with a bucket (prefill_bucket's), padded
        to it and staged for prepare_prefill_replay. Queues device work, never waits for it."""
        if bucket is not None:
            raise self._no_graphs()
        return batch

    def prepare_decode(
        self,
        batch: DecodeBatch,
        rows: int,  # the step's row count (padded to the bucket's when bucket is given)
        layout: AttentionLayout,
        bucket: Hashable | None = None,
    ) -> object:
        """The step's metadata, read by every layer; with a bucket (decode_bucket's), padded to
        it and staged for prepare_decode_replay. Queues device work, never waits for it."""
        if bucket is not None:
            raise self._no_graphs()
        return batch

    # ----- CUDA-graph hooks -------------------------------------------------------------------
    def supports_graphs(self, device: torch.device) -> bool:
        """Whether steps on `device` can run from static, bucket-sized metadata buffers (what a
        captured CUDA graph reads) through the hooks below."""
        return False

    def prefill_bucket(self, tokens: int, prompts: int, layout: AttentionLayout) -> Hashable:
        """The metadata capacities of a prefill bucket of `tokens` tokens in up to `prompts`
        segments (both already rounded up by the runner)."""
        raise self._no_graphs()

    def decode_bucket(self, batch: DecodeBatch, rows: int, layout: AttentionLayout) -> Hashable:
        """The metadata capacities (requests, prompt and suffix lengths, tiles) that a decode
        bucket of `rows` rows (already rounded up by the runner) needs for `batch`."""
        raise self._no_graphs()

    def decode_buckets(self, rows: int, layout: AttentionLayout) -> tuple[Hashable, ...]:
        """The decode buckets of `rows` rows to capture before serving (beyond those the
        warm-up's requests meet): each must accept `prepare_decode` of an empty batch. None by
        default: buckets are then captured as batches meet them."""
        return ()

    def init_prefill_capture(self, metadata: object, layout: AttentionLayout) -> object:
        """Static buffers for the bucket of `metadata` (prepare_prefill's, with a bucket). What
        they hold until the first prepare_prefill_replay must make a warm-up run harmless."""
        raise self._no_graphs()

    def init_decode_capture(self, metadata: object, layout: AttentionLayout) -> object:
        """Static buffers for the bucket of `metadata` (prepare_decode's, with a bucket),
        allocated before the capture. What they hold until the first prepare_decode_replay
        must make a warm-up run harmless."""
        raise self._no_graphs()

    def prepare_prefill_replay(self, static: object, metadata: object) -> None:
        """Copy a batch's metadata (prepared for the same bucket) into the static buffers;
        queued copies only (the replay that follows reads them in stream order)."""
        raise self._no_graphs()

    def prepare_decode_replay(self, static: object, metadata: object) -> None:
        """Copy a step's metadata (prepared for the same bucket) into the static buffers;
        queued copies only (the replay that follows reads them in stream order)."""
        raise self._no_graphs()

    def _no_graphs(self) -> NotImplementedError:
        return NotImplementedError(f"the {self.name!r} attention backend has no CUDA-graph hooks")
