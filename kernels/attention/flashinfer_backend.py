"""`FlashInferAttention`: FlashInfer's two-level cascade wrapper as an optional decode backend.

Level 0 is each request's prompt (shared by all its rows, read once per request), level 1 each
row's private suffix; FlashInfer merges the two by log-sum-exp, as the Triton cascade does.
The cache is viewed as pages of one slot ([slots, 1, Hkv, D], FlashInfer's NHD layout), so the
engine's slot tables are its page tables without copies. Prefill stays on the Triton kernel.

Optional: `flashinfer` is not a dependency (the device image lacks it; `../shared/device` has
a bundle). Steps run eagerly: the engine captures CUDA graphs for the Triton backend only.
"""

from __future__ import annotations

import itertools

import torch

from widebeam.kernels.attention.base import AttentionBackend
from widebeam.kernels.attention.metadata import DecodeBatch, PrefillBatch
from widebeam.kernels.attention.triton_backend import TritonAttention

WORKSPACE_BYTES = 256 << 20


def flashinfer_available() -> bool:
    try:
        import flashinfer  # noqa: F401
    except ImportError:
        return False
    return True


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
        self._wrapper: object | None = None
        self._planned: DecodeBatch | None = None  # one plan serves every layer of a step
        self._prefill = TritonAttention(page_size=1)

    def prefill(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, batch: PrefillBatch, scale: float
    ) -> torch.Tensor:
        return self._prefill.prefill(q, k, v, batch, scale)

    def decode(
        self,
        q: torch.Tensor,  # [R, Hq, D]
        k_cache: torch.Tensor,  # [slots, Hkv, D]
        v_cache: torch.Tensor,  # [slots, Hkv, D]
        batch: DecodeBatch,
        scale: float,
    ) -> torch.Tensor:  # [R, Hq, D] dtype of q
        if not isinstance(batch, DecodeBatch):
            raise TypeError("the flashinfer backend takes a DecodeBatch (no CUDA-graph packing)")
        if self._planned is not batch:
            self._plan(batch, q, k_cache, scale)
            self._planned = batch
        pages = (k_cache.unsqueeze(1), v_cache.unsqueeze(1))  # [slots, 1, Hkv, D] views
        return self._wrapper.run(q, pages)  # type: ignore[attr-defined]

    def _plan(
        self, batch: DecodeBatch, q: torch.Tensor, k_cache: torch.Tensor, scale: float
    ) -> None:
        group_rows = [g.num_rows for g in batch.groups]
        starts = [0, *itertools.accumulate(group_rows)]
        rows = starts[-1]
        placed = zip(batch.groups, starts[:-1], strict=True)
        if rows != q.shape[0] or any(g.row_start != start for g, start in placed):
            raise ValueError("the flashinfer backend needs the groups' rows back to back")
        device = q.device
        if self._wrapper is None:
            workspace = torch.empty(self.workspace_bytes, dtype=torch.uint8, device=device)
            self._wrapper = self._flashinfer.MultiLevelCascadeAttentionWrapper(2, workspace, "NHD")

        def indptr(lengths: list[int]) -> torch.Tensor:
            return torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32)

        prompt_lens = [int(g.prompt_slots.shape[0]) for g in batch.groups]
        suffix_lens = [
            int(g.suffix_slots.shape[1]) for g in batch.groups for _ in range(g.num_rows)
        ]
        prompt_slots = torch.cat([g.prompt_slots for g in batch.groups]).to(torch.int32)
        suffix_slots = torch.cat([g.suffix_slots.reshape(-1) for g in batch.groups])
        self._wrapper.plan(  # type: ignore[attr-defined]
            [indptr(group_rows).to(device), indptr([1] * rows).to(device)],
            [indptr(prompt_lens).to(device), indptr(suffix_lens).to(device)],
            [prompt_slots, suffix_slots.to(torch.int32)],
            [
                torch.ones(len(batch.groups), dtype=torch.int32, device=device),
                torch.ones(rows, dtype=torch.int32, device=device),
            ],
            q.shape[1],
            k_cache.shape[1],
            q.shape[2],
            1,  # page size: one slot
            sm_scale=scale,
            q_data_type=q.dtype,
            kv_data_type=k_cache.dtype,
        )
