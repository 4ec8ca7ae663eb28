"""A graph-capable attention backend in plain torch, for driving the runner's bucketed (graph)
path on the CPU: its metadata are bucket-sized tensors (what a captured graph would read), its
kernels masked attention over them with no host reads, and it counts the hook calls. It is
not one of the engine's backends and the runner does not know it: what the runner does with
it, it does through the `AttentionBackend` hooks only. It reads an FP8 cache as the reference
does (stored values times the layer's scales)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable
from dataclasses import dataclass, fields

import torch

from widebeam.kernels.attention.base import AttentionBackend
from widebeam.kernels.attention.buckets import DecodeCapacity, decode_capacity
from widebeam.kernels.attention.metadata import AttentionLayout, DecodeBatch, PrefillBatch
from widebeam.kernels.attention.torch_ref import attention_with_lse
from widebeam.kernels.kv.fp8_kv import KvScales, dequantize_kv


@dataclass(frozen=True)
class StaticDecode:
    row_group: torch.Tensor  # [R] int64, group of each row; -1 = padding row
    prompt_slots: torch.Tensor  # [G, T] int64, 0 beyond the group's prompt
    prompt_len: torch.Tensor  # [G] int64
    suffix_slots: torch.Tensor  # [R, S] int64, 0 beyond the row's suffix
    suffix_len: torch.Tensor  # [R] int64


@dataclass(frozen=True)
class StaticPrefill:
    segment: torch.Tensor  # [N] int64, the prompt segment of each token


def _masked_attention(
    q: torch.Tensor,  # [N, Hq, D]
    k: torch.Tensor,  # [N, M, Hkv, D] or [M, Hkv, D]: the keys each query may see
    v: torch.Tensor,  # like k
    scale: float,
    visible: torch.Tensor,  # [N, M] bool
    kv_scales: KvScales | None = None,  # k, v in FP8 with these scales
) -> torch.Tensor:  # [N, Hq, D] dtype of q
    if kv_scales is None:
        k, v = k.float(), v.float()
    else:
        k, v = dequantize_kv(k, kv_scales.k), dequantize_kv(v, kv_scales.v)
    out, _ = attention_with_lse(q.float(), k, v, scale, visible)
    return out.to(q.dtype)


class StaticTorchAttention(AttentionBackend):
    name = "static-torch"

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    def _capture_buffers(self, hook: str, metadata: object, kind: type) -> object:
        """A capture's static buffers: a copy of the first step's metadata of this `kind`."""
        self.calls[hook] += 1
        assert isinstance(metadata, kind)
        return kind(**{f.name: getattr(metadata, f.name).clone() for f in fields(kind)})

    def _replay_into(self, hook: str, static: object, metadata: object, kind: type) -> None:
        """Copy a step's metadata into the capture's buffers (what a replay reads)."""
        self.calls[hook] += 1
        assert isinstance(static, kind) and isinstance(metadata, kind)
        for f in fields(kind):
            getattr(static, f.name).copy_(getattr(metadata, f.name))

    def supports_graphs(self, device: torch.device) -> bool:
        self.calls["supports_graphs"] += 1
        return True

    # ----- decode -----------------------------------------------------------------------------
    def decode_bucket(self, batch: DecodeBatch, rows: int, layout: AttentionLayout) -> Hashable:
        self.calls["decode_bucket"] += 1
        return decode_capacity(batch)

    def prepare_decode(
        self,
        batch: DecodeBatch,
        rows: int,
        layout: AttentionLayout,
        bucket: Hashable | None = None,
    ) -> StaticDecode:
        self.calls["prepare_decode" if bucket is None else "prepare_decode(bucket)"] += 1
        groups = batch.groups
        cap = bucket if isinstance(bucket, DecodeCapacity) else decode_capacity(batch)
        row_group = torch.full((rows,), -1, dtype=torch.int64)
        prompt = torch.zeros((cap.groups, cap.prompt_tokens), dtype=torch.int64)
        prompt_len = torch.zeros(cap.groups, dtype=torch.int64)
        suffix = torch.zeros((rows, cap.suffix), dtype=torch.int64)
        suffix_len = torch.zeros(rows, dtype=torch.int64)
        for i, g in enumerate(groups):
            rows_of = slice(g.row_start, g.row_start + g.num_rows)
            row_group[rows_of] = i
            prompt[i, : g.prompt_slots.shape[0]] = g.prompt_slots.cpu()
            prompt_len[i] = g.prompt_slots.shape[0]
            suffix[rows_of, : g.suffix_slots.shape[1]] = g.suffix_slots.cpu()
            suffix_len[rows_of] = g.suffix_slots.shape[1]
        parts = (row_group, prompt, prompt_len, suffix, suffix_len)
        return StaticDecode(*(t.to(layout.device) for t in parts))

    def decode(
        self,
        q: torch.Tensor,  # [R, Hq, D]
        k_cache: torch.Tensor,  # [slots, Hkv, D]
        v_cache: torch.Tensor,  # [slots, Hkv, D]
        metadata: object,  # a StaticDecode of R rows
        scale: float,
        kv_scales: KvScales | None = None,
    ) -> torch.Tensor:  # [R, Hq, D] dtype of q
        assert isinstance(metadata, StaticDecode)
        group = metadata.row_group.clamp(min=0)
        prompt_cap, suffix_cap = metadata.prompt_slots.shape[1], metadata.suffix_slots.shape[1]
        keys = torch.cat((metadata.prompt_slots[group], metadata.suffix_slots), dim=1)  # [R, T+S]
        in_prompt = torch.arange(prompt_cap, device=q.device) < metadata.prompt_len[group, None]
        in_suffix = torch.arange(suffix_cap, device=q.device) < metadata.suffix_len[:, None]
        visible = torch.cat((in_prompt, in_suffix), dim=1) & (metadata.row_group >= 0)[:, None]
        return _masked_attention(q, k_cache[keys], v_cache[keys], scale, visible, kv_scales)

    def init_decode_capture(self, metadata: object, layout: AttentionLayout) -> object:
        return self._capture_buffers("init_decode_capture", metadata, StaticDecode)

    def prepare_decode_replay(self, static: object, metadata: object) -> None:
        self._replay_into("prepare_decode_replay", static, metadata, StaticDecode)

    # ----- prefill ----------------------------------------------------------------------------
    def prefill_bucket(self, tokens: int, prompts: int, layout: AttentionLayout) -> Hashable:
        self.calls["prefill_bucket"] += 1
        return tokens

    def prepare_prefill(
        self, batch: PrefillBatch, layout: AttentionLayout, bucket: Hashable | None = None
    ) -> StaticPrefill:
        self.calls["prepare_prefill" if bucket is None else "prepare_prefill(bucket)"] += 1
        cu = torch.tensor(batch.cu_seqlens)
        segment = torch.repeat_interleave(torch.arange(len(cu) - 1), cu.diff())
        return StaticPrefill(segment.to(layout.device))

    def prefill(
        self,
        q: torch.Tensor,  # [N, Hq, D]
        k: torch.Tensor,  # [N, Hkv, D]
        v: torch.Tensor,  # [N, Hkv, D]
        metadata: object,  # a StaticPrefill of N tokens
        scale: float,
        kv_scales: KvScales | None = None,
    ) -> torch.Tensor:  # [N, Hq, D] dtype of q
        assert isinstance(metadata, StaticPrefill)
        seg = metadata.segment
        visible = (seg[:, None] == seg[None, :]) & torch.ones(
            len(seg), len(seg), dtype=torch.bool, device=q.device
        ).tril()
        return _masked_attention(q, k, v, scale, visible, kv_scales)

    def init_prefill_capture(self, metadata: object, layout: AttentionLayout) -> object:
        return self._capture_buffers("init_prefill_capture", metadata, StaticPrefill)

    def prepare_prefill_replay(self, static: object, metadata: object) -> None:
        self._replay_into("prepare_prefill_replay", static, metadata, StaticPrefill)
