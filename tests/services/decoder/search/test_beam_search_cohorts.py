"""`BeamSearch.batched_outputs`: the [B, k] state a cohort step loads, whichever steps its
searches' states come from."""

from __future__ import annotations

from dataclasses import fields

import torch

from widebeam.services.decoder.search.beam_host_step import stage_on_host
from widebeam.services.decoder.search.beam_search import BeamSearch, adopt_cohort
from widebeam.services.decoder.search.beam_step import BeamState
from widebeam.services.decoder.search.beam_step_outputs import StepOutputs

CPU = torch.device("cpu")
K = 3


def _search() -> BeamSearch:
    return BeamSearch(K, K, 1.0, False, torch.tensor([0]), 4, CPU)


def _outputs(batch: int, seed: int) -> StepOutputs:
    gen = torch.Generator().manual_seed(seed)
    empty = StepOutputs.empty(batch, K, CPU)
    return StepOutputs(
        torch.randn(empty.floats.shape, generator=gen),
        torch.randint(0, 9, empty.ints.shape, generator=gen),
        torch.rand(empty.flags.shape, generator=gen) > 0.5,
        torch.rand(empty.request_flags.shape, generator=gen) > 0.5,
    )


def _stepped(count: int, seed: int) -> tuple[list[BeamSearch], StepOutputs]:
    searches, outputs = [_search() for _ in range(count)], _outputs(count, seed)
    adopt_cohort(searches, outputs)
    return searches, outputs


def _assert_states_equal(got: BeamState, want: BeamState) -> None:
    for f in fields(BeamState):
        assert torch.equal(getattr(got, f.name), getattr(want, f.name)), f.name


def test_exactly_the_previous_batch_reuses_its_outputs() -> None:
    searches, outputs = _stepped(3, 0)
    assert BeamSearch.batched_outputs(searches) is outputs
    assert [bool(s.done_flag) for s in searches] == outputs.done.tolist()


def test_fresh_searches_get_the_initial_state() -> None:
    searches = [_search() for _ in range(2)]
    got = BeamSearch.batched_outputs(searches)
    assert got is not None
    _assert_states_equal(got.state, BeamSearch.batched_state(searches))


def test_searches_of_several_batches_are_gathered_in_order() -> None:
    first, _ = _stepped(3, 1)
    second, _ = _stepped(2, 2)
    cohort = [second[1], first[0], first[2], second[0]]
    got = BeamSearch.batched_outputs(cohort)
    assert got is not None and got.batch_size == 4
    _assert_states_equal(got.state, BeamSearch.batched_state(cohort))


def test_part_of_a_batch_is_a_view_of_it() -> None:
    searches, outputs = _stepped(4, 3)
    got = BeamSearch.batched_outputs(searches[1:3])
    assert got is not None and got.floats.data_ptr() == outputs.floats[1].data_ptr()
    _assert_states_equal(got.state, BeamSearch.batched_state(searches[1:3]))


def test_fresh_beside_stepped_has_no_outputs() -> None:
    stepped, _ = _stepped(1, 4)
    assert BeamSearch.batched_outputs([stepped[0], _search()]) is None


def test_adopt_cohort_hands_each_search_its_row() -> None:
    searches, outputs = _stepped(2, 5)
    hosts = stage_on_host(outputs)
    for b, search in enumerate(searches):
        assert search.step == 1 and search._row == b and search._outputs is outputs
        assert search.done_flag.data_ptr() == outputs.done[b].data_ptr()
        assert torch.equal(search.host_steps[0].ints, hosts[b].ints)
