"""`StepOutputs`' packed layout: fresh requests' state, rows gathered across batches, and the
state views and copies a cohort step loads."""

from __future__ import annotations

from dataclasses import fields

import torch

from tests.services.decoder.search.random_outputs import random_step_outputs
from widebeam.services.decoder.search.beam_step import BeamState
from widebeam.services.decoder.search.beam_step_outputs import StepOutputs

CPU = torch.device("cpu")
K = 5


def _random_outputs(batch: int, seed: int) -> StepOutputs:
    return random_step_outputs(batch, K, seed)


def _assert_states_equal(got: BeamState, want: BeamState) -> None:
    for f in fields(BeamState):
        a, b = getattr(got, f.name), getattr(want, f.name)
        assert a.dtype == b.dtype and a.shape == b.shape, f.name
        assert torch.equal(a, b), f.name


def test_initial_outputs_hold_the_initial_state() -> None:
    for batch in (1, 3):
        outputs = StepOutputs.initial(batch, K, CPU)
        _assert_states_equal(outputs.state, BeamState.initial(batch, K, CPU))
        assert not outputs.done.any()


def test_state_views_name_the_packed_rows() -> None:
    outputs = _random_outputs(3, 0)
    state = outputs.state
    assert torch.equal(state.running_scores, outputs.floats[:, 4])
    assert torch.equal(state.fin_parent, outputs.ints[:, 3])
    assert torch.equal(state.fin_ghost, outputs.flags[:, 2])
    assert torch.equal(state.heuristic_open, outputs.request_flags[:, 0])
    state.fin_step[1, 2] = 77  # views: written through to the packed tensor
    assert outputs.ints[1, 2, 2] == 77
    assert torch.equal(outputs.parents, outputs.ints[:, 0])
    assert torch.equal(outputs.done, outputs.request_flags[:, 1])


def test_gather_takes_rows_across_batches_in_order() -> None:
    a, b = _random_outputs(3, 1), _random_outputs(2, 2)
    sources = [(b, 1), (a, 0), (a, 1), (b, 0), (a, 2)]
    gathered = StepOutputs.gather(sources)
    assert gathered.batch_size == len(sources)
    for mine, (outputs, row) in zip(range(len(sources)), sources, strict=True):
        for got, want in zip(gathered.tensors(), outputs.tensors(), strict=True):
            assert torch.equal(got[mine], want[row])
    _assert_states_equal(
        gathered.state, BeamState.stack([o.state.row(r) for o, r in sources])
    )  # fmt: skip


def test_gather_of_consecutive_rows_of_one_batch_is_a_view() -> None:
    outputs = _random_outputs(4, 3)
    gathered = StepOutputs.gather([(outputs, 1), (outputs, 2)])
    for got, whole in zip(gathered.tensors(), outputs.tensors(), strict=True):
        assert got.data_ptr() == whole[1].data_ptr() and torch.equal(got, whole[1:3])


def test_load_state_copies_into_the_first_requests() -> None:
    static = StepOutputs.empty(4, K, CPU)
    source = _random_outputs(2, 4)
    static.load_state(source.state)
    _assert_states_equal(static.state.row(0), source.state.row(0))
    _assert_states_equal(static.state.row(1), source.state.row(1))
    assert not static.floats[2:].any() and not static.request_flags[2:].any()
