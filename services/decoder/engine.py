"""The engine loop: admit, prefill, decode, select, finish — continuous batching of beam groups.

Policy lives in `Scheduler` (plain Python); tensors live in `ModelRunner`; per-request
selection lives in `BeamSearch` / `GreedySearch`. One `step()` prefills the requests admitted
now, then runs one decode forward over every running row, beam and ordinary requests together.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence
from typing import NamedTuple

import torch

from widebeam.kernels.attention.factory import make_attention_backend, resolve_backend_name
from widebeam.kernels.attention.metadata import DecodeBatch, DecodeGroup
from widebeam.services.decoder.beam.beam_search import BeamSearch, StepSelection
from widebeam.services.decoder.beam.candidates import RowLogprobs, top_candidates
from widebeam.services.decoder.beam.logprobs import processed_logprobs
from widebeam.services.decoder.catalog_loading import load_catalog_constraint, resolve_layout
from widebeam.services.decoder.config import EngineConfig
from widebeam.services.decoder.constraint.trie_constraint import TrieConstraint
from widebeam.services.decoder.kv.kv_cache import KVCache
from widebeam.services.decoder.kv.page_allocator import PageAllocator
from widebeam.services.decoder.model.config import GenerationDefaults
from widebeam.services.decoder.model.transformer import CausalLM
from widebeam.services.decoder.request import GenerationRequest, RequestError, RequestOutput
from widebeam.services.decoder.results import build_output
from widebeam.services.decoder.runner.model_runner import ModelRunner
from widebeam.services.decoder.scheduler.request_start import start_request
from widebeam.services.decoder.scheduler.request_state import RequestState
from widebeam.services.decoder.scheduler.scheduler import Scheduler
from widebeam.services.decoder.validation import EngineLimits, validate_request

DEFAULT_CATALOG = "default"
log = logging.getLogger(__name__)


def _missing_catalog_message(name: str | None, loaded: dict[str, TrieConstraint]) -> str:
    if not loaded:
        return "constrained request but no catalog is loaded"
    return f"unknown catalog {name or DEFAULT_CATALOG!r}; loaded: {', '.join(sorted(loaded))}"


class EngineStats(NamedTuple):
    rows_in_use: int
    running: int
    waiting: int  # submitted, not yet admitted
    kv_slots_free: int
    waiting_ids: frozenset[str]


class Engine:
    def __init__(self, config: EngineConfig, model: CausalLM | None = None) -> None:
        """`model`: an already-loaded model of `config.model_dir` (benchmarks share one model
        between the engine and a baseline); by default it is loaded from `config.model_dir`."""
        self.config = config
        self.device = torch.device(config.device)
        dtype = getattr(torch, config.dtype)
        if model is None:
            model = CausalLM.from_pretrained(config.model_dir, dtype=dtype, device=self.device)
        self.model = model
        mc = self.model.config
        self.vocab_size = mc.vocab_size
        defaults = GenerationDefaults.from_pretrained(config.model_dir)
        pages = PageAllocator(config.max_kv_slots // config.page_size, config.page_size)
        self.limits = EngineLimits(
            vocab_size=mc.vocab_size,
            max_model_len=config.max_model_len or mc.max_position_embeddings,
            max_rows=config.max_rows,
            max_kv_slots=pages.capacity_slots,
            default_eos_ids=tuple(defaults.eos_token_ids),
        )
        # One page beyond the allocator's: the trash slot padded decode rows write to.
        cache = KVCache(
            mc.num_hidden_layers,
            pages.capacity_slots + config.page_size,
            mc.num_key_value_heads,
            mc.head_dim,
            dtype,
            self.device,
        )
        backend_name = resolve_backend_name(config.attention_backend, self.device.type)
        options = {"page_size": config.page_size} if backend_name == "triton" else {}
        self.runner = ModelRunner(
            self.model,
            cache,
            make_attention_backend(backend_name, **options),
            trash_slot=pages.capacity_slots,
            cuda_graphs=config.cuda_graphs,
            page_size=config.page_size,
        )
        self.scheduler = Scheduler(config.max_rows, pages, config.max_prefill_tokens)
        # Catalog name -> the trie new admissions pin; admitted requests keep their own.
        self.catalogs: dict[str, TrieConstraint] = {}
        self.sid_layout = None
        if config.catalog_path:
            self.sid_layout = resolve_layout(config.model_dir, config.sid_layout, mc.vocab_size)
            self.catalogs[DEFAULT_CATALOG] = load_catalog_constraint(
                config.catalog_path, self.sid_layout, self.device
            )
        self._arrivals = itertools.count()

    # ----- public API -------------------------------------------------------------------------
    @property
    def constraint(self) -> TrieConstraint | None:
        """The default catalog's trie (None when none is loaded)."""
        return self.catalogs.get(DEFAULT_CATALOG)

    def set_catalog(self, name: str, constraint: TrieConstraint | None) -> None:
        """Swap (or drop, with None) a catalog for new admissions; admitted requests keep the
        version they pinned until they finish."""
        if constraint is None:
            self.catalogs.pop(name, None)
        else:
            self.catalogs[name] = constraint

    def submit(self, request: GenerationRequest) -> None:
        """Queue a request; raises RequestError (and changes nothing) when it cannot run."""
        constraint = None
        if request.constrained:
            constraint = self.catalogs.get(request.catalog or DEFAULT_CATALOG)
            if constraint is None:
                raise RequestError(_missing_catalog_message(request.catalog, self.catalogs))
        path_len = constraint.path_length(request.input_ids) if constraint else None
        resolved = validate_request(request, self.limits, path_len)
        self.scheduler.add(RequestState(resolved, constraint, next(self._arrivals)))

    def abort(self, request_id: str) -> bool:
        return self.scheduler.abort(request_id) is not None

    def has_unfinished(self) -> bool:
        return self.scheduler.has_work()

    def stats(self) -> EngineStats:
        sched = self.scheduler
        return EngineStats(
            sched.rows_in_use,
            len(sched.running),
            len(sched.waiting),
            sched.pages.free_slots,
            frozenset(state.request_id for state in sched.waiting),
        )

    def step(self) -> list[RequestOutput]:
        done: list[RequestOutput] = []
        admitted = self.scheduler.admit()
        if admitted:
            done += self._prefill(admitted)
        active = [s for s in self.scheduler.running if not s.finished]
        if active:
            done += self._decode(active)
        return done

    def generate(self, requests: Sequence[GenerationRequest]) -> list[RequestOutput]:
        """Run all requests together; outputs in input order (errors as outputs)."""
        outputs: dict[int, RequestOutput] = {}
        index_of: dict[str, int] = {}
        for i, req in enumerate(requests):
            if req.request_id in index_of:
                outputs[i] = RequestOutput(req.request_id, error="duplicate request id")
                continue
            try:
                self.submit(req)
                index_of[req.request_id] = i
            except RequestError as exc:
                outputs[i] = RequestOutput(req.request_id, error=str(exc))
        while self.has_unfinished():
            for out in self.step():
                outputs[index_of[out.request_id]] = out
        return [outputs[i] for i in range(len(requests))]

    # ----- internals --------------------------------------------------------------------------
    def _prefill(self, states: list[RequestState]) -> list[RequestOutput]:
        for state in states:
            start_request(state, self.scheduler.pages.page_size, self.device)
        hidden = self.runner.prefill(
            [s.resolved.spec.input_ids for s in states], [s.prompt_slots for s in states]
        )
        return self._select([(s, hidden[i : i + 1]) for i, s in enumerate(states)])

    def _decode(self, states: list[RequestState]) -> list[RequestOutput]:
        groups, tokens, positions, writes = [], [], [], []
        row = 0
        for state in states:
            step = state.search.step - 1  # index of the pending token among generated tokens
            groups.append(DecodeGroup(row, state.num_rows, state.prompt_slots, state.suffix_table))
            tokens.append(state.pending_tokens)
            positions.append(
                torch.full(
                    (state.num_rows,),
                    state.prompt_len + step,
                    dtype=torch.int64,
                    device=self.device,
                )
            )
            writes.append(state.suffix_table[:, -1])
            row += state.num_rows
        hidden = self.runner.decode(
            torch.cat(tokens), torch.cat(positions), torch.cat(writes), DecodeBatch(tuple(groups))
        )
        chunks, row = [], 0
        for state in states:
            chunks.append((state, hidden[row : row + state.num_rows]))
            row += state.num_rows
        return self._select(chunks)

    def _select(self, chunks: list[tuple[RequestState, torch.Tensor]]) -> list[RequestOutput]:
        """chunks: each request with its rows' final hidden states [rows, hidden]."""
        finished, advanced = [], []
        for state, hidden in chunks:
            try:
                advanced.append((state, self._advance(state, hidden)))
            except Exception as exc:  # one request's failure must not take its batch down
                log.exception("request %s failed in its beam step", state.request_id)
                self.scheduler.finish(state)
                finished.append(RequestOutput(state.request_id, error=f"internal error: {exc}"))
        beams = [state.search for state, _ in advanced if isinstance(state.search, BeamSearch)]
        if beams:  # one device read for every beam request's stop decision
            flags = torch.stack([b.done_flag for b in beams]).tolist()
            for search, done in zip(beams, flags, strict=True):
                search.resolve_done(done)
        for state, selection in advanced:
            if state.search.done:
                finished.append(self._finish(state))
            else:
                self._apply(state, selection)
        return finished

    def _advance(self, state: RequestState, hidden: torch.Tensor) -> StepSelection:
        search, constraint = state.search, state.constraint
        if isinstance(search, BeamSearch):
            block_eos = search.step < state.resolved.spec.min_new_tokens
            if self._streamed(search.num_beams):
                allowed = None
                if constraint is not None:
                    allowed = constraint.allowed_tokens(state.nodes, search.eos_ids)
                source = RowLogprobs(
                    hidden,
                    self.runner.raw_logits,
                    self.vocab_size,
                    search.eos_ids,
                    block_eos,
                    allowed,
                )
                cands = top_candidates(source, search.running_scores, search.keep)
                return search.advance_candidates(cands)
        logits = self.runner.logits(hidden)
        mask = None
        if constraint is not None:
            mask = constraint.mask(state.nodes, search.eos_ids, self.vocab_size)
        if isinstance(search, BeamSearch):
            return search.advance(processed_logprobs(logits, mask, search.eos_ids, block_eos))
        return search.advance(logits, mask)

    def _streamed(self, num_beams: int) -> bool:
        config = self.config
        wide = num_beams * self.vocab_size > config.dense_expansion_limit
        return config.beam_expansion == "streamed" and wide

    def _apply(self, state: RequestState, sel: StepSelection) -> None:
        k, step = state.num_rows, state.search.step - 1
        new_slots = state.private_slots[step * k : (step + 1) * k]
        state.suffix_table = torch.cat((state.suffix_table[sel.parents], new_slots[:, None]), 1)
        state.pending_tokens = sel.tokens
        if state.constraint is not None:
            # At step 0 every row still sits on the prompt's single start node.
            nodes = state.nodes.expand(k) if state.nodes.shape[0] != k else state.nodes
            state.nodes = state.constraint.advance(nodes[sel.parents], sel.tokens)

    def _finish(self, state: RequestState) -> RequestOutput:
        self.scheduler.finish(state)
        return build_output(state)
