"""A graph-capable attention backend in plain torch, for driving the runner's bucketed (graph)
path on the CPU: its metadata are bucket-sized tensors (what a captured graph would read), its
kernels masked attention over them with no host reads, and it counts the hook calls. It is
not one of the engine's backends and the runner does not know it: what the runner does with
it, it does through the `AttentionBackend` hooks only."""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable
from dataclasses import dataclass, fields

import torch

from widebeam.kernels.attention.base import AttentionBackend
from widebeam.kernels.attention.buckets import DecodeCapacity, decode_capacity
from widebeam.kernels.attention.metadata import AttentionLayout, DecodeBatch, PrefillBatch
from widebeam.kernels.attention.torch_ref import attention_with_lse


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


def _clone(metadata: StaticDecode | StaticPrefill) -> StaticDecode | StaticPrefill:
    return type(metadata)(**{f.name: getattr(metadata, f.name).clone() for f in fields(metadata)})


def _copy(static: StaticDecode | StaticPrefill, metadata: StaticDecode | StaticPrefill) -> None:
    for f in fields(static):
        getattr(static, f.name).copy_(getattr(metadata, f.name))


class StaticTorchAttention(AttentionBackend):
    name = "static-torch"

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

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
    ) -> torch.Tensor:  # [R, Hq, D] dtype of q
        assert isinstance(metadata, StaticDecode)
        group = metadata.row_group.clamp(min=0)
        prompt_cap, suffix_cap = metadata.prompt_slots.shape[1], metadata.suffix_slots.shape[1]
        keys = torch.cat((metadata.prompt_slots[group], metadata.suffix_slots), dim=1)  # [R, T+S]
        in_prompt = torch.arange(prompt_cap, device=q.device) < metadata.prompt_len[group, None]
        in_suffix = torch.arange(suffix_cap, device=q.device) < metadata.suffix_len[:, None]
        visible = torch.cat((in_prompt, in_suffix), dim=1) & (metadata.row_group >= 0)[:, None]
        out, _ = attention_with_lse(
            q.float(), k_cache[keys].float(), v_cache[keys].float(), scale, visible
        )
        return out.to(q.dtype)

    def init_decode_capture(self, metadata: object, layout: AttentionLayout) -> object:
        self.calls["init_decode_capture"] += 1
        assert isinstance(metadata, StaticDecode)
        return _clone(metadata)

    def prepare_decode_replay(self, static: object, metadata: object) -> None:
        self.calls["prepare_decode_replay"] += 1
        assert isinstance(static, StaticDecode) and isinstance(metadata, StaticDecode)
        _copy(static, metadata)

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
    ) -> torch.Tensor:  # [N, Hq, D] dtype of q
        assert isinstance(metadata, StaticPrefill)
        seg = metadata.segment
        visible = (seg[:, None] == seg[None, :]) & torch.ones(
            len(seg), len(seg), dtype=torch.bool, device=q.device
        ).tril()
        out, _ = attention_with_lse(q.float(), k.float(), v.float(), scale, visible)
        return out.to(q.dtype)

    def init_prefill_capture(self, metadata: object, layout: AttentionLayout) -> object:
        self.calls["init_prefill_capture"] += 1
        assert isinstance(metadata, StaticPrefill)
        return _clone(metadata)

    def prepare_prefill_replay(self, static: object, metadata: object) -> None:
        self.calls["prepare_prefill_replay"] += 1
        assert isinstance(static, StaticPrefill) and isinstance(metadata, StaticPrefill)
        _copy(static, metadata)
