"""`beam_step`'s host helpers: a state's rows taken apart and stacked, and each request's step
scalars in `Scalar` order."""

from __future__ import annotations

from dataclasses import fields

import pytest
import torch

from widebeam.services.decoder.search.beam_step import (
    STATE_FIELDS,
    BeamState,
    Scalar,
    state_tensors,
    step_scalars,
)

CPU = torch.device("cpu")


def _state(batch: int, seed: int) -> BeamState:
    gen = torch.Generator().manual_seed(seed)
    initial = BeamState.initial(batch, 4, CPU)
    values = {}
    for f in fields(BeamState):
        like = getattr(initial, f.name)
        if like.dtype == torch.bool:
            values[f.name] = torch.rand(like.shape, generator=gen) > 0.5
        elif like.dtype == torch.int64:
            values[f.name] = torch.randint(0, 9, like.shape, generator=gen)
        else:
            values[f.name] = torch.randn(like.shape, generator=gen)
    return BeamState(**values)


def test_state_tensors_follow_the_fields() -> None:
    state = _state(2, 0)
    assert tuple(f.name for f in fields(BeamState)) == STATE_FIELDS
    for name, tensor in zip(STATE_FIELDS, state_tensors(state), strict=True):
        assert tensor is getattr(state, name)


def test_row_and_stack_round_trip() -> None:
    state = _state(3, 1)
    rows = [state.row(b) for b in range(3)]
    for b, row in enumerate(rows):
        assert row.batch_size == 1
        for f in fields(BeamState):
            assert torch.equal(getattr(row, f.name), getattr(state, f.name)[b : b + 1])
    stacked = BeamState.stack([rows[2], rows[0]])
    for f in fields(BeamState):
        want = getattr(state, f.name)[[2, 0]]
        assert torch.equal(getattr(stacked, f.name), want), f.name


def _scalars_by_name(
    step: int, max_new_tokens: int, length_penalty: float, early_stopping: bool | str
) -> list[float]:
    """The definition, column by column."""
    never = early_stopping == "never" and length_penalty > 0.0
    best_len = max_new_tokens if never else step + 1
    values = {
        Scalar.STEP: float(step),
        Scalar.FINISHED_DIVISOR: float((step + 1) ** length_penalty),
        Scalar.RUNNING_DIVISOR: float(best_len**length_penalty),
        Scalar.LAST_STEP: float(step + 1 >= max_new_tokens),
    }
    return tuple(values[column] for column in Scalar)


@pytest.mark.parametrize("early_stopping", [True, False, "never"])
@pytest.mark.parametrize("length_penalty", [1.0, 0.0, -1.5, 2.0, 0.7])
def test_step_scalars_in_scalar_order(early_stopping: bool | str, length_penalty: float) -> None:
    for step in range(5):
        got = step_scalars(step, 4, length_penalty, early_stopping)
        assert got == _scalars_by_name(step, 4, length_penalty, early_stopping)
