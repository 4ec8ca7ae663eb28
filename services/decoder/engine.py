"""The engine loop: admit, prefill, decode, select, finish — continuous batching of beam groups.

Admission policy lives in `scheduler/` (plain Python); the model's forwards and the running
requests' tensors (slot tables, step inputs, re-parenting) in `runner/`; the search strategies
(beam, greedy, sampling) in `search/`; what callers send and get back in `requests/`. One
`step()` prefills the requests admitted now, then runs one decode forward over every running
row, beam and ordinary requests together.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import NamedTuple

import torch

from widebeam.kernels.attention.factory import make_attention_backend, resolve_backend_name
from widebeam.services.catalog.default_name import DEFAULT_CATALOG
from widebeam.services.decoder.catalog_loading import load_catalog_constraint, resolve_layout
from widebeam.services.decoder.config import BeamExpansion, EngineConfig, Quantization
from widebeam.services.decoder.constraint.trie_constraint import TrieConstraint
from widebeam.services.decoder.kv.kv_cache import KVCache, kv_storage_dtype
from widebeam.services.decoder.kv.kv_capacity import kv_capacity_slots, kv_slot_bytes
from widebeam.services.decoder.kv.page_allocator import PageAllocator
from widebeam.services.decoder.kv.start_up_memory import start_up_memory
from widebeam.services.decoder.model.config import GenerationDefaults
from widebeam.services.decoder.model.kv_scales import kv_scales_for
from widebeam.services.decoder.model.transformer import CausalLM
from widebeam.services.decoder.requests.results import RequestOutput
from widebeam.services.decoder.requests.spec import GenerationRequest, RequestError
from widebeam.services.decoder.requests.validation import EngineLimits, validate_request
from widebeam.services.decoder.runner.beam_cohorts import advance_cohorts
from widebeam.services.decoder.runner.capture_counts import GraphKind
from widebeam.services.decoder.runner.capture_plan import (
    CaptureBucket,
    prefill_graph_tokens,
    startup_captures,
    warm_up_requests,
)
from widebeam.services.decoder.runner.decode_inputs import decode_inputs
from widebeam.services.decoder.runner.model_runner import ModelRunner
from widebeam.services.decoder.runner.request_start import start_request
from widebeam.services.decoder.runner.request_state import RequestState
from widebeam.services.decoder.runner.request_step import StepPolicy
from widebeam.services.decoder.runner.step_counts import StepCounts
from widebeam.services.decoder.runner.step_inputs import PreparedStep
from widebeam.services.decoder.runner.stop_flags import StagedFlags, resolve_flags, stage_flags
from widebeam.services.decoder.scheduler.scheduler import Scheduler
from widebeam.services.decoder.search.beam_search import BeamSearch

log = logging.getLogger(__name__)
_NO_ANNOTATION = contextlib.nullcontext()


def no_annotation(_phase: str) -> AbstractContextManager[object]:
    """`Engine.annotate` outside a timeline capture: nothing to record."""
    return _NO_ANNOTATION


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
    queued_work: int  # rows x decode steps still ahead, waiting and running requests together
    waiting_rows: int  # rows of the waiting requests


class Engine:
    def __init__(self, config: EngineConfig, model: CausalLM | None = None) -> None:
        """`model`: an already-loaded model of `config.model_dir` (benchmarks share one model
        between the engine and a baseline); by default it is loaded from `config.model_dir`."""
        self.config = config
        self.device = torch.device(config.device)
        dtype = getattr(torch, config.dtype)
        if model is None:
            model = CausalLM.from_pretrained(
                config.model_dir,
                dtype=dtype,
                device=self.device,
                quantization=config.quantization,
                fp8_accumulation=config.fp8_accumulation,
                head_quantization=config.head_quantization,
            )
        elif model.quantization != config.quantization:
            raise ValueError(
                f"the given model was loaded with quantization {model.quantization.value!r}, "
                f"the config asks for {config.quantization.value!r}"
            )
        elif (
            model.quantization == Quantization.FP8
            and model.fp8_accumulation != config.fp8_accumulation
        ):
            raise ValueError(
                f"the given model's FP8 GEMMs were loaded with fp8_accumulation "
                f"{model.fp8_accumulation.value!r}, the config asks for "
                f"{config.fp8_accumulation.value!r}"
            )
        elif model.head_quantization != config.head_quantization:
            raise ValueError(
                f"the given model's LM head was loaded with head_quantization "
                f"{model.head_quantization.value!r}, the config asks for "
                f"{config.head_quantization.value!r}"
            )
        self.model = model
        mc = self.model.config
        self.vocab_size = mc.vocab_size
        defaults = GenerationDefaults.from_pretrained(config.model_dir)
        kv_dtype = kv_storage_dtype(config.kv_dtype, dtype, self.device)
        kv_scales = None
        if kv_dtype != dtype:  # FP8: from_pretrained's scales (a model built otherwise: ours)
            kv_scales = self.model.kv_scales
            if kv_scales is None:
                kv_scales = kv_scales_for(self.model)
            log.info("KV cache in %s with static per-head scales", kv_dtype)
        slot_bytes = kv_slot_bytes(
            mc.num_hidden_layers, mc.num_key_value_heads, mc.head_dim, kv_dtype
        )
        kv_slots = kv_capacity_slots(config, slot_bytes, self.device)
        pages = PageAllocator(kv_slots // config.page_size, config.page_size)
        self._slot_bytes = slot_bytes
        self.limits = EngineLimits(
            vocab_size=mc.vocab_size,
            max_model_len=config.max_model_len or mc.max_position_embeddings,
            max_rows=config.max_rows,
            max_kv_slots=pages.capacity_slots,
            default_eos_ids=tuple(defaults.eos_token_ids),
        )
        # One page beyond the allocator's: the trash slot padded decode rows write to.
        with self._start_up_memory("allocating the KV cache"):
            cache = KVCache(
                mc.num_hidden_layers,
                pages.capacity_slots + config.page_size,
                mc.num_key_value_heads,
                mc.head_dim,
                kv_dtype,
                self.device,
                kv_scales,
            )
        backend_name = resolve_backend_name(config.attention_backend, self.device.type)
        self.step_counts = StepCounts()
        self.runner = ModelRunner(
            self.model,
            cache,
            make_attention_backend(
                backend_name,
                page_size=config.page_size,
                shared_suffix=config.shared_suffix_attention,
                fp8_queries=config.kv_fp8_queries,
                fp8_probabilities=config.kv_fp8_probabilities,
            ),
            trash_slot=pages.capacity_slots,
            cuda_graphs=config.cuda_graphs,
            prefill_graph_tokens=prefill_graph_tokens(config),
            prefill_graph_split=config.prefill_graph_split,
            step_counts=self.step_counts,
        )
        self.step_policy = StepPolicy(
            mc.vocab_size,
            self.runner.logits,
            self.runner.expander,
            config.beam_expansion == BeamExpansion.STREAMED,
            config.dense_expansion_limit,
        )
        self.scheduler: Scheduler[RequestState] = Scheduler(
            config.max_rows, pages, config.max_prefill_tokens, config.prefix_cache,
            config.admission_ratio, config.admission_max_wait_steps,
        )  # fmt: skip
        # Catalog name -> the trie new admissions pin; admitted requests keep their own.
        self.catalogs: dict[str, TrieConstraint] = {}
        self.sid_layout = None
        if config.catalog_path:
            self.sid_layout = resolve_layout(config.model_dir, config.sid_layout, mc.vocab_size)
            with self._start_up_memory("loading the catalog onto the device"):
                self.catalogs[DEFAULT_CATALOG] = load_catalog_constraint(
                    config.catalog_path, self.sid_layout, self.device
                )
        self._arrivals = itertools.count()
        self._pending: list[StagedFlags] = []  # beam steps whose stop flags are not read yet
        # Finished (rows and KV released) but answer not built yet: `answers_after_launch`
        # builds these once the step's forwards are queued. (state, its cached prompt tokens)
        self._unbuilt: list[tuple[RequestState, int]] = []
        self.last_step_rows = 0  # rows the last step advanced by a token (throughput meters)
        # Marks each phase of a step on a device timeline (`profiling/capture.py` swaps in
        # torch's record_function while it captures); "engine.<phase>" names.
        self.annotate: Callable[[str], AbstractContextManager[object]] = no_annotation

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
            sched.kv.free_slots,
            frozenset(state.request_id for state in sched.waiting),
            sum(s.num_rows * s.remaining_steps for s in (*sched.waiting, *sched.running)),
            sum(s.num_rows for s in sched.waiting),
        )

    def warm_up(self) -> float:
        """Capture the start-up list's graphs (`runner/capture_plan.py`) by running one
        synthetic request per bucket; nothing without CUDA graphs. Returns the seconds spent.
        Call it before serving: it steps the engine until idle."""
        if not self.runner.uses_graphs:
            return 0.0
        started = time.perf_counter()
        plan = startup_captures(self.config)
        path = None if self.constraint is None else self.constraint.path_length((0,))
        # Each warm-up prompt must prefill all its tokens to fill its bucket: no prefix reuse
        # (their prompts share zeros), and nothing of them left cached.
        kv = self.scheduler.kv
        kv.enabled = False
        try:
            for bucket in plan:
                during = f"capturing the start-up graphs ({bucket.kind} bucket {bucket.size})"
                with self._start_up_memory(during, capture=True):
                    self._warm_up_bucket(bucket, path)
        finally:
            kv.enabled = self.config.prefix_cache
        seconds = time.perf_counter() - started
        log.info(
            "captured %d CUDA graphs for %d start-up buckets in %.1f s",
            sum(self.runner.capture_counts.counts.values()), len(plan), seconds,
        )  # fmt: skip
        return seconds

    def _warm_up_bucket(self, bucket: CaptureBucket, path: int | None) -> None:
        requests = warm_up_requests(bucket, self.config, self.limits.max_model_len, path)
        errors = {out.error for out in self.generate(requests) if out.error is not None}
        if errors:  # a bucket this configuration cannot fill
            log.warning("warm-up of %s %s skipped: %s", bucket.kind, bucket.size, errors.pop())
        if bucket.kind == GraphKind.DECODE:  # the attention buckets no request met
            self.runner.capture_decode_buckets(bucket.size)

    def _start_up_memory(self, during: str, capture: bool = False) -> AbstractContextManager[None]:
        """Out of GPU memory `during` a start-up step: a StartUpMemoryError that names the KV
        cache's size and what to give less."""
        slots = self.limits.max_kv_slots
        return start_up_memory(self.config, slots, self._slot_bytes, during, capture)

    def mark_ready(self) -> None:
        """Serving starts: captures from now on count as captures while serving."""
        self.runner.capture_counts.mark_ready()

    def step(
        self,
        intake: Callable[[], None] | None = None,
        deliver: Callable[[list[RequestOutput]], None] | None = None,
    ) -> list[RequestOutput]:
        """Prefill the admitted requests, then one decode step over every running row (see
        `_step`); its time counts as the engine's busy time. `intake` runs on this thread right
        before admission (with overlap scheduling also before the step reads the previous
        one's flags, and again after them unless a queue was admitted then and
        `intake_after_flags` is off): a server submits there what arrived since its last
        call, so it joins this step instead of the next.
        `deliver` gets the answers the step's start resolved (the previous step's finished
        requests) before the step ends: with `answers_after_launch` as soon as they are built,
        right after this step's decode is launched (before its selection), else right away,
        before this step's forwards. A server's caller then has the rest of the step to send
        its next request, which the next step's first intake admits (returned too, with the
        rest)."""
        started = time.perf_counter()
        try:
            with self.annotate("engine.step"):
                return self._step(intake, deliver)
        finally:
            self.step_counts.step_seconds += time.perf_counter() - started

    def _step(
        self,
        intake: Callable[[], None] | None,
        deliver: Callable[[list[RequestOutput]], None] | None,
    ) -> list[RequestOutput]:
        """Prefill the admitted requests, then one decode step over every running row.

        With `overlap_scheduling` the host takes in arrivals and prepares this step's decode
        batch (slot tables, packed attention metadata, copies) while the device still runs the
        previous step's beam selection, and only then reads the previous step's stop flags;
        after them it takes in what arrived meanwhile, admits, and prepares the batch with the
        new requests while the device prefills them. With `admit_before_flags` a waiting queue
        that fits whole in the rows and free pages held before the flags is admitted then
        instead, its prefill queued behind that selection, so the device has work while the
        host reads flags and builds answers; that set is the one admission after the flags
        would take (finished requests only add room, and FIFO takes the same whole queue);
        with `intake_after_flags` the requests that arrived while the flags were read are
        taken in and admitted after them as well, in a second prefill. The decode set is
        decided after the flags in every mode (a batch prepared for requests that turned out
        done is prepared again), so all modes run the same batches for the same arrivals and
        compute exactly the same thing. With `answers_after_launch` the requests the flags
        finish release their rows and KV there, but their answers are built after the step's
        forwards are queued: at its end, or for `deliver` right after the decode's launch.

        A new request's first flag is not waited for: its decode is queued behind its prefill.
        The rare request done at its first step (all its best candidates end, or none can go
        on) is decoded once for nothing; when its flag is read its search is rewound to the
        step that finished it (`BeamSearch.resolve_done`), so its answer is unchanged."""
        # Answers leave in synchronous scheduling's order whatever the mode: those the earlier
        # steps' flags finish (synchronous scheduling returns them at the end of the step
        # before) ahead of those this step's prefill and selection finish.
        flagged: list[RequestOutput] = []
        done: list[RequestOutput] = []
        candidates: list[RequestState] = []
        prepared = None
        admitted: list[RequestState] = []
        annotate = self.annotate
        if self.config.overlap_scheduling:
            if intake is not None:
                with annotate("engine.intake"):
                    intake()
            earlier = len(self._pending)  # the flags of the steps before this one
            if self.config.admit_before_flags:
                with annotate("engine.admit"):
                    admitted = self.scheduler.admit_whole_queue()
                if admitted:  # queued behind the previous step's selection, before its flags
                    with annotate("engine.prefill"):
                        done += self._prefill(admitted)
            candidates = self._decode_candidates()
            if candidates:
                with annotate("engine.prepare"):
                    prepared = self._prepare_decode(candidates)
            # Built after this step's decode is launched, or now (then `deliver` takes them
            # now, before this step's forwards).
            later = self.config.answers_after_launch
            flagged = self._resolve(earlier, build_answers=not later)
            if (flagged or done) and deliver is not None and not later:
                deliver(flagged + done)
        if not admitted or self.config.intake_after_flags:
            if intake is not None:
                with annotate("engine.intake"):
                    intake()
            with annotate("engine.admit"):
                late = self.scheduler.admit()
            if late:
                admitted = admitted + late
                with annotate("engine.prefill"):
                    done += self._prefill(late)
                if self.config.overlap_scheduling:  # the host prepares while the device prefills
                    candidates = self._decode_candidates()
                    if candidates:
                        with annotate("engine.prepare"):
                            prepared = self._prepare_decode(candidates)
        self.last_step_rows = sum(s.num_rows for s in admitted)
        active = self._decode_candidates()
        self.last_step_rows += sum(s.num_rows for s in active)
        if active:
            if prepared is None or [id(s) for s in active] != [id(s) for s in candidates]:
                with annotate("engine.prepare"):
                    prepared = self._prepare_decode(active)
            with annotate("engine.decode"):
                hidden = self.runner.launch_decode(prepared)
            self.step_counts.decode_forwards += 1
            self.step_counts.decode_rows += prepared.inputs.tokens.shape[0]
            if deliver is not None and self._unbuilt:
                # Built while the device runs the decode, and handed over before the selection,
                # so the callers' next requests can arrive while this step still runs.
                with annotate("engine.finish"):
                    early = self._build_answers()
                deliver(early)
                flagged += early
            chunks, row = [], 0
            for state in active:
                chunks.append((state, hidden[row : row + state.num_rows]))
                row += state.num_rows
            done += self._select(chunks)
        if not self.config.overlap_scheduling:
            done += self._resolve()
        if self._unbuilt:
            with annotate("engine.finish"):
                built = self._build_answers()
            if deliver is not None:
                deliver(built)
            flagged += built
        return flagged + done

    def _decode_candidates(self) -> list[RequestState]:
        # A request at its last token is done whatever its flag says: never prepared.
        return [s for s in self.scheduler.running if not s.finished and not s.at_token_limit]

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
            [s.resolved.spec.input_ids for s in states],
            [s.prompt_slots for s in states],
            [s.cached_prompt_tokens for s in states],
        )
        self.step_counts.prefill_forwards += 1
        self.step_counts.prefilled_requests += len(states)
        computed = sum(s.prompt_len - s.cached_prompt_tokens for s in states)
        self.step_counts.prefill_tokens += computed
        return self._select([(s, hidden[i : i + 1]) for i, s in enumerate(states)])

    def _prepare_decode(self, states: list[RequestState]) -> PreparedStep:
        return self.runner.prepare_decode(decode_inputs(states, self.device))

    def _select(self, chunks: list[tuple[RequestState, torch.Tensor]]) -> list[RequestOutput]:
        """chunks: each request with its rows' final hidden states [rows, hidden]. Queues every
        request's step (lockstep beam requests as one cohort); beam requests' stop flags are
        read later (`_resolve`). Returns the answers of requests it finished."""
        with self.annotate("engine.select"):
            return self._select_steps(chunks)

    def _select_steps(self, chunks: list[tuple[RequestState, torch.Tensor]]) -> list[RequestOutput]:
        streamed = advance_cohorts(chunks, self.step_policy, self.config.batch_beam_steps)
        self.step_counts.beam_expansions += streamed.cohorts
        finished, beams = [], []
        for i, (state, hidden) in enumerate(chunks):
            failure = streamed.failures.get(i)
            if i not in streamed.advanced and failure is None:
                try:
                    # Applied even if the request turns out to be done: that only rewrites its
                    # own slot tables, which nothing reads once it is finished.
                    self.step_policy.advance(state, hidden)
                except Exception as exc:  # one request's failure must not take its batch down
                    log.exception("request %s failed in its step", state.request_id)
                    failure = exc
            if failure is not None:
                self.scheduler.finish(state)
                finished.append(RequestOutput(state.request_id, error=f"internal error: {failure}"))
                continue
            if isinstance(state.search, BeamSearch):
                beams.append(state)
            elif state.search.done:  # greedy / sampled: decided on the host already
                finished.append(self._finish(state))
        if beams:
            self._pending.append(stage_flags(beams))
        return finished

    def _resolve(
        self, staged_steps: int | None = None, build_answers: bool = True
    ) -> list[RequestOutput]:
        """Read the stop flags of the first `staged_steps` staged beam steps (default: all)
        and finish the requests they end: their answers, or with `build_answers` False only
        their release (the answers wait in `_unbuilt`)."""
        count = len(self._pending) if staged_steps is None else staged_steps
        finished = []
        for staged in self._pending[:count]:
            with self.annotate("engine.wait_flags"):
                resolve_flags(staged)
            with self.annotate("engine.finish"):
                for state in staged.states:
                    if state.finished or not state.search.done:  # (an abort finished it)
                        continue
                    cached = self._release(state)
                    if build_answers:
                        finished.append(self._answer(state, cached))
                    else:
                        self._unbuilt.append((state, cached))
        del self._pending[:count]
        return finished

    def _build_answers(self) -> list[RequestOutput]:
        unbuilt, self._unbuilt = self._unbuilt, []
        return [self._answer(state, cached) for state, cached in unbuilt]

    def _finish(self, state: RequestState) -> RequestOutput:
        """Release the request's rows and KV, and build its answer."""
        return self._answer(state, self._release(state))

    def _release(self, state: RequestState) -> int:
        """Release the request's rows and KV; returns its cached prompt tokens (read before
        the reservation goes)."""
        cached = state.cached_prompt_tokens
        self.scheduler.finish(state)
        return cached

    def _answer(self, state: RequestState, cached: int) -> RequestOutput:
        """A finished request's answer, from its search's host copies (which nothing touches
        once it is released); an answer that cannot be built fails this request alone."""
        try:
            return replace(state.output(), cached_prompt_tokens=cached)
        except Exception as exc:  # one answer's failure must not take its step down
            log.exception("request %s: its answer could not be built", state.request_id)
            return RequestOutput(state.request_id, error=f"internal error: {exc}")
