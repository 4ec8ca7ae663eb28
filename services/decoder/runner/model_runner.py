"""The part of the engine that touches the model and the KV cache (everything on `device`)."""

from __future__ import annotations

import itertools
import math

import torch

from widebeam.kernels.attention.base import AttentionBackend
from widebeam.kernels.attention.metadata import DecodeBatch, PackedPrefill, PrefillBatch
from widebeam.kernels.attention.packed import PackedDecode
from widebeam.services.decoder.beam.expansion import Expander
from widebeam.services.decoder.host_copies import to_device_async
from widebeam.services.decoder.kv.kv_cache import KVCache
from widebeam.services.decoder.model.transformer import CausalLM
from widebeam.services.decoder.runner.attention_contexts import DecodeContext, PrefillContext
from widebeam.services.decoder.runner.decode_graphs import (
    DecodeGraphs,
    DecodeShape,
    PreparedStep,
    decode_shape,
)
from widebeam.services.decoder.runner.expansion_graphs import ExpansionGraphs
from widebeam.services.decoder.runner.prefill_graphs import PrefillGraphs, prefill_host_inputs
from widebeam.services.decoder.runner.step_inputs import DecodeInputs


class ModelRunner:
    def __init__(
        self,
        model: CausalLM,
        cache: KVCache,
        backend: AttentionBackend,
        trash_slot: int | None = None,  # a cache slot no request owns (padding rows write it)
        cuda_graphs: bool = False,
        page_size: int = 1,
        prefill_graph_tokens: int = 0,
    ) -> None:
        """On CUDA with the Triton backend and a trash slot, decode steps and streamed beam
        expansions run at bucketed shapes, replayed from CUDA graphs when `cuda_graphs` (else
        eagerly at the same shapes); so do prefill batches of up to `prefill_graph_tokens`
        prompt tokens (0: eager)."""
        self.model = model
        self.cache = cache
        self.backend = backend
        self.device = cache.k.device
        self.scale = 1.0 / math.sqrt(model.config.head_dim)
        self.graphs: DecodeGraphs | None = None
        if self.device.type == "cuda" and backend.name == "triton" and trash_slot is not None:
            self.graphs = DecodeGraphs(
                self._forward,
                self._shape_of,
                page_size,
                trash_slot,
                self.device,
                use_graphs=cuda_graphs,
            )
            self._page_size = page_size
        self.expander = Expander(self.raw_logits, model.config.vocab_size)
        if self.graphs is not None:
            self.expander = ExpansionGraphs(
                self.raw_logits,
                model.config.vocab_size,
                model.config.hidden_size,
                model.lm_head_weight.dtype,
                self.device,
                use_graphs=cuda_graphs,
            )
        self.prefill_graphs: PrefillGraphs | None = None
        self.prefill_graph_tokens = prefill_graph_tokens
        if self.graphs is not None and prefill_graph_tokens > 0:
            from widebeam.kernels.attention.triton_prefill import prefill_block_q

            mc = model.config
            self.prefill_graphs = PrefillGraphs(
                self._prefill_forward,
                prefill_block_q(mc.num_attention_heads, mc.num_key_value_heads),
                trash_slot,  # type: ignore[arg-type]
                self.device,
                use_graphs=cuda_graphs,
            )

    def _shape_of(self, batch: DecodeBatch, rows: int) -> DecodeShape:
        from widebeam.kernels.attention.triton_common import (
            default_block_rows,
            default_num_splits,
        )

        mc = self.model.config
        q_heads, kv_heads = mc.num_attention_heads, mc.num_key_value_heads
        return decode_shape(
            batch,
            rows,
            self._page_size,
            lambda widest: default_block_rows(q_heads, kv_heads, widest),
            lambda work, longest: default_num_splits(work * kv_heads, longest, self.device),
        )

    def _forward(
        self,
        tokens: torch.Tensor,  # [R] int64
        positions: torch.Tensor,  # [R] int64
        write_slots: torch.Tensor,  # [R] int64
        batch: DecodeBatch | PackedDecode,
    ) -> torch.Tensor:  # [R, hidden]
        ctx = DecodeContext(self.cache, write_slots, batch, self.backend, self.scale)
        return self.model(tokens, positions, ctx)

    def _prefill_forward(
        self,
        ids: torch.Tensor,  # [T] int64
        positions: torch.Tensor,  # [T] int64
        write_slots: torch.Tensor,  # [T] int64
        packed: PackedPrefill,
        last: torch.Tensor,  # [P] int64
    ) -> torch.Tensor:  # [P, hidden]
        ctx = PrefillContext(self.cache, write_slots, packed, self.backend, self.scale)
        return self.model(ids, positions, ctx)[last]

    @torch.inference_mode()
    def prefill(
        self,
        prompts: list[tuple[int, ...]],
        prompt_slots: list[torch.Tensor],  # each [prompt_len] int64
    ) -> torch.Tensor:  # [num_prompts, hidden] final hidden state of each prompt's last token
        lengths = [len(p) for p in prompts]
        if self.prefill_graphs is not None and sum(lengths) <= self.prefill_graph_tokens:
            return self.prefill_graphs.run(prompts, prompt_slots)
        cu = [0, *itertools.accumulate(lengths)]
        # One host buffer, one queued copy (no host wait, so the host queues the first beam
        # step while the device still runs the prefill).
        host = torch.from_numpy(prefill_host_inputs(prompts, lengths, cu[-1], len(prompts)))
        ids, positions, last = to_device_async(host, self.device).split(
            [cu[-1], cu[-1], len(prompts)]
        )
        ctx = PrefillContext(
            self.cache, torch.cat(prompt_slots), PrefillBatch(tuple(cu)), self.backend, self.scale
        )
        hidden = self.model(ids, positions, ctx)
        return hidden[last]

    def prepare_decode(self, inputs: DecodeInputs) -> DecodeInputs | PreparedStep:
        """Host-side preparation of a decode step; nothing here waits for the device."""
        return self.graphs.prepare(inputs) if self.graphs is not None else inputs

    @torch.inference_mode()
    def launch_decode(self, step: DecodeInputs | PreparedStep) -> torch.Tensor:
        """Queue the prepared step's forward: [R, hidden] final hidden states."""
        if isinstance(step, PreparedStep):
            assert self.graphs is not None
            return self.graphs.launch(step)
        return self._forward(step.tokens, step.positions, step.write_slots, step.batch)

    @torch.inference_mode()
    def logits(self, hidden: torch.Tensor) -> torch.Tensor:  # [N, hidden] -> [N, vocab] fp32
        return self.model.head_logits(hidden).float()

    @torch.inference_mode()
    def raw_logits(
        self,
        hidden: torch.Tensor,  # [N, hidden] model dtype
        columns: torch.Tensor | None = None,  # [C] int64 vocabulary ids
    ) -> torch.Tensor:  # [N, vocab] or [N, C] model dtype
        if columns is None:
            return self.model.head_logits(hidden)
        return self.model.column_logits(hidden, columns)
