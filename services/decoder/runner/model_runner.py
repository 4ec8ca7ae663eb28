"""The part of the engine that touches the model and the KV cache (everything on `device`)."""

from __future__ import annotations

import itertools
import math

import torch

from widebeam.kernels.attention.base import AttentionBackend
from widebeam.kernels.attention.metadata import AttentionLayout, PrefillBatch
from widebeam.services.decoder.host_copies import to_device_async
from widebeam.services.decoder.kv.kv_cache import KVCache
from widebeam.services.decoder.model.transformer import CausalLM
from widebeam.services.decoder.runner.attention_contexts import (
    DecodeContext,
    PrefillContext,
    PrefixPrefillContext,
)
from widebeam.services.decoder.runner.capture_counts import CaptureCounts
from widebeam.services.decoder.runner.decode_graphs import DecodeGraphs
from widebeam.services.decoder.runner.expansion_graphs import ExpansionGraphs
from widebeam.services.decoder.runner.prefill_graphs import (
    MAX_RECOMPUTED_PREFIX_TOKENS,
    TOKEN_STEP,
    PrefillGraphs,
    fits_graph,
    graph_sized_groups,
    largest_bucket,
    prefill_host_inputs,
    split_prefill_inputs,
)
from widebeam.services.decoder.runner.prefix_prefill import prefix_prefill_inputs
from widebeam.services.decoder.runner.step_counts import StepCounts
from widebeam.services.decoder.runner.step_inputs import DecodeInputs, PreparedStep
from widebeam.services.decoder.search.beam_expansion import Expander


class ModelRunner:
    def __init__(
        self,
        model: CausalLM,
        cache: KVCache,
        backend: AttentionBackend,
        trash_slot: int | None = None,  # a cache slot no request owns (padding rows write it)
        cuda_graphs: bool = False,
        prefill_graph_tokens: int = 0,
        prefill_graph_split: bool = False,
        step_counts: StepCounts | None = None,  # where the prefills past the graph limit count
    ) -> None:
        """When the attention backend supports graphs on the cache's device and a trash slot is
        given, decode steps and streamed beam expansions run at bucketed shapes, replayed from
        CUDA graphs when `cuda_graphs` and the device is CUDA (else eagerly at the same
        shapes); so do prefill batches of up to `prefill_graph_tokens` prompt tokens (0:
        eager), and with `prefill_graph_split` larger batches of prompts that each fit, as
        consecutive graph-sized batches. Otherwise every step runs eagerly at its own size."""
        self.model = model
        self.cache = cache
        self.backend = backend
        self.device = cache.k.device
        mc = model.config
        self.layout = AttentionLayout(
            q_heads=mc.num_attention_heads,
            kv_heads=mc.num_key_value_heads,
            head_dim=mc.head_dim,
            q_dtype=model.lm_head_weight.dtype,
            kv_dtype=cache.k.dtype,
            scale=1.0 / math.sqrt(mc.head_dim),
            device=self.device,
            cache_slots=cache.num_slots,
        )
        self.scale = self.layout.scale
        use_graphs = cuda_graphs and self.device.type == "cuda"
        self.capture_counts = CaptureCounts()
        self.graphs: DecodeGraphs | None = None
        if trash_slot is not None and backend.supports_graphs(self.device):
            self.graphs = DecodeGraphs(
                self._forward, backend, self.layout, trash_slot, self.device, use_graphs,
                self.capture_counts,
            )  # fmt: skip
        self.expander = Expander(self.raw_logits, mc.vocab_size)
        if self.graphs is not None:
            self.expander = ExpansionGraphs(
                self.raw_logits,
                mc.vocab_size,
                mc.hidden_size,
                model.lm_head_weight.dtype,
                self.device,
                use_graphs=use_graphs,
                counts=self.capture_counts,
            )
        self.prefill_graphs: PrefillGraphs | None = None
        self.prefill_graph_tokens = prefill_graph_tokens
        self.prefill_graph_split = prefill_graph_split
        self.step_counts = StepCounts() if step_counts is None else step_counts
        self.uses_graphs = self.graphs is not None and use_graphs
        if self.graphs is not None and prefill_graph_tokens > 0:
            token_buckets = largest_bucket(prefill_graph_tokens) // TOKEN_STEP
            self.prefill_graphs = PrefillGraphs(
                self._prefill_forward,
                backend,
                self.layout,
                self.graphs.trash_slot,
                self.device,
                use_graphs=use_graphs,
                counts=self.capture_counts,
                # one graph per token bucket of the start-up list: none is ever evicted
                max_entries=max(PrefillGraphs.max_graphs, token_buckets),
            )

    @torch.inference_mode()  # as every step: the graphs' shared outputs are inference tensors
    def capture_decode_buckets(self, rows: int) -> int:
        """Capture the decode graphs of every attention bucket the backend lists for the row
        bucket of `rows` (the start-up list's part no warm-up request fills); returns how many
        were built."""
        return 0 if self.graphs is None else self.graphs.capture_buckets(rows)

    def _forward(
        self,
        tokens: torch.Tensor,  # [R] int64
        positions: torch.Tensor,  # [R] int64
        write_slots: torch.Tensor,  # [R] int64
        metadata: object,  # the backend's decode metadata for R rows
    ) -> torch.Tensor:  # [R, hidden]
        ctx = DecodeContext(self.cache, write_slots, metadata, self.backend, self.scale)
        return self.model(tokens, positions, ctx)

    def _prefill_forward(
        self,
        ids: torch.Tensor,  # [T] int64
        positions: torch.Tensor,  # [T] int64
        write_slots: torch.Tensor,  # [T] int64
        metadata: object,  # the backend's prefill metadata for T tokens
        last: torch.Tensor,  # [P] int64
    ) -> torch.Tensor:  # [P, hidden]
        ctx = PrefillContext(self.cache, write_slots, metadata, self.backend, self.scale)
        return self.model(ids, positions, ctx)[last]

    @torch.inference_mode()
    def prefill(
        self,
        prompts: list[tuple[int, ...]],
        prompt_slots: list[torch.Tensor],  # each [prompt_len] int64
        cached: list[int] | None = None,  # each prompt's tokens whose KV is cached (default 0)
    ) -> torch.Tensor:  # [num_prompts, hidden] final hidden state of each prompt's last token
        lengths = [len(p) for p in prompts]
        limit = self.prefill_graph_tokens
        graphs = self.prefill_graphs is not None
        skip_prefixes = cached is not None and sum(cached) > MAX_RECOMPUTED_PREFIX_TOKENS
        in_graph = graphs and not skip_prefixes and fits_graph(lengths, limit)
        if not in_graph and graphs and not skip_prefixes and self.prefill_graph_split:
            groups = graph_sized_groups(lengths, limit)
            if groups is not None:
                self.step_counts.split_prefills += 1
                cached = cached or [0] * len(prompts)
                return torch.cat([
                    self.prefill(prompts[a:b], prompt_slots[a:b], cached[a:b]) for a, b in groups
                ])  # fmt: skip
        if not in_graph:
            self.step_counts.eager_prefills += 1
        if cached is not None and any(cached):
            if not in_graph:
                return self._prefill_after_prefixes(prompts, prompt_slots, cached)
            # Few enough cached tokens to recompute (MAX_RECOMPUTED_PREFIX_TOKENS): the batch
            # runs whole in its graph. The cached positions write the trash slot, so the
            # shared prefix pages keep their KV.
            prompt_slots = [self._trash_prefix(s, c) for s, c in zip(prompt_slots, cached,
                                                                      strict=True)]  # fmt: skip
        if in_graph:
            assert self.prefill_graphs is not None
            return self.prefill_graphs.run(prompts, prompt_slots)
        cu = [0, *itertools.accumulate(lengths)]
        # One host buffer, one queued copy (no host wait, so the host queues the first beam
        # step while the device still runs the prefill).
        host = torch.from_numpy(prefill_host_inputs(prompts, lengths, cu[-1], len(prompts)))
        ids, positions, last = split_prefill_inputs(to_device_async(host, self.device), cu[-1])
        metadata = self.backend.prepare_prefill(PrefillBatch(tuple(cu)), self.layout)
        return self._prefill_forward(ids, positions, torch.cat(prompt_slots), metadata, last)

    def _trash_prefix(
        self,
        slots: torch.Tensor,  # [prompt_len] int64
        cached: int,
    ) -> torch.Tensor:  # [prompt_len] int64, the first `cached` replaced by the trash slot
        if cached == 0:
            return slots
        assert self.graphs is not None  # prefill graphs exist only beside decode graphs
        return torch.cat((slots.new_full((cached,), self.graphs.trash_slot), slots[cached:]))

    def _prefill_after_prefixes(
        self, prompts: list[tuple[int, ...]], prompt_slots: list[torch.Tensor], cached: list[int]
    ) -> torch.Tensor:  # [num_prompts, hidden]
        """Eager prefill of the uncached suffixes over the cached prefixes' KV."""
        inputs = prefix_prefill_inputs(prompts, prompt_slots, cached, self.device)
        metadata = self.backend.prepare_prefill(inputs.full_batch, self.layout)
        ctx = PrefixPrefillContext(
            self.cache, inputs.write_slots, metadata, self.backend, self.scale,
            inputs.full_slots, inputs.query_index,
        )  # fmt: skip
        return self.model(inputs.ids, inputs.positions, ctx)[inputs.last]

    def prepare_decode(self, inputs: DecodeInputs) -> PreparedStep:
        """Host-side preparation of a decode step; nothing here waits for the device."""
        if self.graphs is not None:
            return self.graphs.prepare(inputs)
        rows = inputs.tokens.shape[0]
        return PreparedStep(
            inputs, self.backend.prepare_decode(inputs.batch, rows, self.layout), None
        )

    @torch.inference_mode()
    def launch_decode(self, step: PreparedStep) -> torch.Tensor:
        """Queue the prepared step's forward: [R, hidden] final hidden states."""
        if step.shape is not None:
            assert self.graphs is not None
            return self.graphs.launch(step)
        inputs = step.inputs
        return self._forward(inputs.tokens, inputs.positions, inputs.write_slots, step.metadata)

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
