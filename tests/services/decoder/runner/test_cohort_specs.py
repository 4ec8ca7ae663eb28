"""A request's expansion specs are built once and kept on its state (`CohortSpecs`): what a step
picks must equal the spec built afresh from the request at that step, whatever the step, the
min_new_tokens, the catalog swapped under a running request or the policy."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from tests.services.decoder.conftest import SID_LEVELS, SidModel, write_catalog
from widebeam.services.catalog.default_name import DEFAULT_CATALOG
from widebeam.services.decoder.catalog_loading import load_catalog_constraint
from widebeam.services.decoder.engine import Engine
from widebeam.services.decoder.requests.spec import GenerationRequest, Normalization
from widebeam.services.decoder.runner.beam_cohorts import cohort_key, expansion_spec
from widebeam.services.decoder.runner.request_start import start_request
from widebeam.services.decoder.runner.request_state import RequestState
from widebeam.services.decoder.runner.request_step import StepPolicy
from widebeam.services.decoder.search.beam_expansion import ExpansionSpec
from widebeam.services.decoder.search.beam_search import BeamSearch
from widebeam.services.decoder.search.beam_step import step_scalars


def _fresh_spec(state: RequestState, policy: StepPolicy) -> ExpansionSpec | None:
    """The spec as it was built for every request and step before it was cached."""
    search, constraint = state.search, state.constraint
    if not isinstance(search, BeamSearch) or not policy.streams(search.num_beams):
        return None
    width = policy.vocab_size if constraint is None else max(constraint.max_fanout, 1)
    return ExpansionSpec(
        num_beams=search.num_beams,
        keep=search.keep,
        rows_each=1 if search.step == 0 else search.num_beams,
        eos_ids=state.resolved.eos_ids,
        block_eos=search.step < state.resolved.spec.min_new_tokens,
        early_stopping=search.early_stopping,
        wide=search.num_beams * min(search.keep, width) > policy.one_pass_limit,
        constraint=constraint,
        normalization=state.resolved.spec.normalization,
    )


def _engine(sid_model: SidModel, **overrides: object) -> Engine:
    return sid_model.engine(dense_expansion_limit=0, **overrides)  # every beam streams


def _check_running(engine: Engine, policy: StepPolicy | None = None) -> int:
    """Compare every running request's picked spec with a fresh one; returns how many."""
    policy = engine.step_policy if policy is None else policy
    checked = 0
    for state in engine.scheduler.running:
        if state.finished or state.search is None:
            continue
        assert expansion_spec(state, policy) == _fresh_spec(state, policy), state.request_id
        checked += 1
    return checked


def test_cached_specs_match_fresh_ones_at_every_step(sid_model: SidModel) -> None:
    engine = _engine(sid_model)
    begin = engine.sid_layout.begin_token_id
    requests = [
        GenerationRequest("sid", (4, begin), beam_width=6, n=3, max_new_tokens=4,
                          constrained=True, normalization="sid"),
        # No EOS: it runs to its last token, EOS blocked for its first three steps.
        GenerationRequest("lm", (1, 2), beam_width=4, n=2, max_new_tokens=6, min_new_tokens=3,
                          ignore_eos=True, length_penalty=-0.5),
        GenerationRequest("never", (3,), beam_width=4, n=4, max_new_tokens=5,
                          eos_token_id=(9,), early_stopping="never", min_new_tokens=4),
        GenerationRequest("greedy", (5,), max_new_tokens=4),
    ]  # fmt: skip
    for request in requests:
        engine.submit(request)
    seen: dict[str, set[tuple[int, bool]]] = {}
    checked = 0
    while engine.has_unfinished():
        engine.step()
        checked += _check_running(engine)
        for state in engine.scheduler.running:
            spec = expansion_spec(state, engine.step_policy)
            if spec is not None:
                seen.setdefault(state.request_id, set()).add((spec.rows_each, spec.block_eos))
    assert checked > 0
    # Seen between steps, so after their first: EOS blocked, then not.
    assert seen["lm"] == {(4, True), (4, False)}
    assert (4, True) in seen["never"]
    assert "greedy" not in seen


def test_a_cohort_shares_its_specs_whatever_each_request_blocks(sid_model: SidModel) -> None:
    """Requests of one shape share one `CohortSpecs` once they advance together, and each
    still picks its own step's spec (its first step, its min_new_tokens)."""
    engine = _engine(sid_model)
    for i, (min_new, max_new) in enumerate([(0, 5), (2, 6), (0, 4), (3, 6)]):
        engine.submit(GenerationRequest(f"r{i}", (i + 1, 7), beam_width=4, n=2,
                                        max_new_tokens=max_new, min_new_tokens=min_new,
                                        eos_token_id=(9,), length_penalty=0.5 * i))  # fmt: skip
    engine.step()
    engine.submit(GenerationRequest("late", (3,), beam_width=4, n=2, max_new_tokens=4,
                                    eos_token_id=(9,), min_new_tokens=1))  # fmt: skip
    shared = 0
    while engine.has_unfinished():
        _check_running(engine)
        engine.step()
        _check_running(engine)
        running = [s for s in engine.scheduler.running if not s.finished]
        keys = [cohort_key(s, engine.step_policy) for s in running]
        for a, key_a in zip(running, keys, strict=True):
            for b, key_b in zip(running, keys, strict=True):
                if a is not b and key_a == key_b and a.cohort_specs is b.cohort_specs:
                    shared += 1
    assert shared > 0


def test_first_step_specs_match_before_any_step(sid_model: SidModel) -> None:
    """A request admitted but not stepped yet picks its first step's spec (one hidden row)."""
    engine = _engine(sid_model)
    engine.submit(GenerationRequest("a", (1, 2), beam_width=6, n=2, max_new_tokens=3,
                                    min_new_tokens=2))  # fmt: skip
    (state,) = engine.scheduler.admit()
    start_request(state, engine.scheduler.pages.page_size, engine.device)
    spec = expansion_spec(state, engine.step_policy)
    assert spec == _fresh_spec(state, engine.step_policy)
    assert spec is not None and spec.rows_each == 1 and spec.block_eos
    engine.scheduler.finish(state)


def _swapped_catalog(engine: Engine, tmp_path: Path) -> object:
    path = tmp_path / "catalog-2.jsonl"
    write_catalog(path, 200, SID_LEVELS, seed=23)
    return load_catalog_constraint(path, engine.sid_layout, engine.device)


def test_a_running_request_keeps_its_pinned_trie_after_a_swap(
    sid_model: SidModel, tmp_path: Path
) -> None:
    engine = _engine(sid_model)
    begin = engine.sid_layout.begin_token_id
    old = engine.constraint

    def request(name: str) -> GenerationRequest:
        return GenerationRequest(name, (4, begin), beam_width=6, n=3, max_new_tokens=4,
                                 constrained=True, normalization=Normalization.SID)  # fmt: skip

    engine.submit(request("before"))
    engine.step()  # admitted, prefilled, and one decode step
    before = next(s for s in engine.scheduler.running if s.request_id == "before")
    spec_before = expansion_spec(before, engine.step_policy)
    assert spec_before is not None and spec_before.constraint is old
    new = _swapped_catalog(engine, tmp_path)
    engine.set_catalog(DEFAULT_CATALOG, new)
    engine.submit(request("after"))
    engine.step()
    after = next(s for s in engine.scheduler.running if s.request_id == "after")
    assert before.constraint is old and after.constraint is new
    assert expansion_spec(before, engine.step_policy).constraint is old
    assert expansion_spec(after, engine.step_policy).constraint is new
    assert cohort_key(before, engine.step_policy) != cohort_key(after, engine.step_policy)
    assert _check_running(engine) == 2
    while engine.has_unfinished():
        engine.step()
        _check_running(engine)


def test_specs_follow_the_policy_and_the_pinned_trie(sid_model: SidModel, tmp_path: Path) -> None:
    """Specs built for one policy (or trie) are not reused under another one."""
    engine = _engine(sid_model)
    begin = engine.sid_layout.begin_token_id
    engine.submit(GenerationRequest("a", (4, begin), beam_width=6, n=3, max_new_tokens=4,
                                    constrained=True))  # fmt: skip
    engine.step()
    (state,) = engine.scheduler.running
    policy = engine.step_policy
    assert expansion_spec(state, policy) == _fresh_spec(state, policy)
    narrow = dataclasses.replace(policy, one_pass_limit=1)  # every beam ranks blocks: wide
    spec = expansion_spec(state, narrow)
    assert spec == _fresh_spec(state, narrow) and spec is not None and spec.wide
    assert cohort_key(state, narrow) == (spec, id(state))  # a wide request advances alone
    dense = dataclasses.replace(policy, streamed=False)
    assert expansion_spec(state, dense) is None and cohort_key(state, dense) is None
    assert expansion_spec(state, policy) is not None  # built for `policy` again
    state.constraint = _swapped_catalog(engine, tmp_path)  # type: ignore[assignment]
    spec = expansion_spec(state, policy)
    assert spec is not None and spec.constraint is state.constraint
    engine.abort("a")


def test_step_slots_are_the_private_slots_of_each_step(sid_model: SidModel) -> None:
    engine = _engine(sid_model)
    engine.submit(GenerationRequest("a", (1, 2, 3), beam_width=4, n=2, max_new_tokens=5))
    engine.step()
    (state,) = engine.scheduler.running
    k = state.num_rows
    for step in range(5):
        expected = state.private_slots[step * k : (step + 1) * k]
        assert torch.equal(state.step_slots(step), expected)
    engine.abort("a")


@pytest.mark.parametrize("early_stopping", [True, False, "never"])
def test_cached_scalars_are_the_step_scalars(sid_model: SidModel, early_stopping: object) -> None:
    search = BeamSearch(4, 2, -0.5, early_stopping, torch.tensor([9]), 6, torch.device("cpu"))  # type: ignore[arg-type]
    for step in range(6):
        search.step = step
        assert search.scalars() == step_scalars(step, 6, -0.5, early_stopping)  # type: ignore[arg-type]
