"""A cohort's expansion equals each member's alone; ranking blocks (wide) equals ranking rows;
packed step outputs hold exactly the step's state."""

from __future__ import annotations

from collections.abc import Callable

import torch

from widebeam.services.decoder.search.beam_expansion import ExpansionInputs, ExpansionSpec, expand
from widebeam.services.decoder.search.beam_step import BeamState, step_scalars
from widebeam.services.decoder.search.beam_step_outputs import StepOutputs

VOCAB, HIDDEN, K = 300, 16, 6


def _head(seed: int) -> Callable[[torch.Tensor], torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    weight = torch.randn(VOCAB, HIDDEN, generator=gen).double() * 3

    def head(h: torch.Tensor) -> torch.Tensor:  # rows are independent of the batch's size
        return (h.double() @ weight.T).float()

    return head


def _spec(rows_each: int, wide: bool, step: int = 1) -> ExpansionSpec:
    return ExpansionSpec(
        num_beams=K,
        keep=2 * K,
        rows_each=rows_each,
        eos_ids=(7,),
        block_eos=step < 2,
        early_stopping=False,
        wide=wide,
        constraint=None,
    )


def _state(batch: int, seed: int) -> BeamState:
    gen = torch.Generator().manual_seed(seed)
    state = BeamState.initial(batch, K, torch.device("cpu"))
    state.running_scores = -torch.rand(batch, K, generator=gen) * 5
    state.running_ghost = torch.zeros(batch, K, dtype=torch.bool)
    return state


def _inputs(
    hidden: torch.Tensor,
    state: BeamState,
    step: int,
    rows: list[list[float]] | None = None,  # each request's scalars (default: all at `step`)
) -> ExpansionInputs:
    if rows is None:
        rows = [step_scalars(step, 10, 1.0, False)] * state.batch_size
    return ExpansionInputs(hidden, state, None, torch.tensor(rows), torch.tensor([7]))


def test_cohort_equals_each_request_alone_and_wide_equals_rows() -> None:
    batch, head = 3, _head(0)
    hidden = torch.randn(batch * K, HIDDEN, generator=torch.Generator().manual_seed(1))
    state = _state(batch, 2)
    together = expand(_spec(K, False), _inputs(hidden, state, 1), head, VOCAB)
    for b in range(batch):
        rows = hidden[b * K : (b + 1) * K]
        for wide in (False, True):
            alone = expand(_spec(K, wide), _inputs(rows, state.row(b), 1), head, VOCAB)
            assert torch.equal(alone.ints[0], together.ints[b])
            assert torch.equal(alone.flags[0], together.flags[b])
            assert torch.equal(alone.request_flags[0], together.request_flags[b])
            torch.testing.assert_close(alone.floats[0], together.floats[b])


def test_requests_at_different_steps_lengths_and_penalties_share_a_cohort() -> None:
    """Each request's step scalars are its own: a cohort of requests at different steps, with
    different lengths and length penalties (one at its last step, where every candidate
    finishes), expands each as it would alone."""
    batch, plain = 3, _head(6)

    def head(h: torch.Tensor) -> torch.Tensor:  # EOS (7) among the candidates: finishes
        logits = plain(h)
        logits[:, 7] += 4.0
        return logits

    hidden = torch.randn(batch * K, HIDDEN, generator=torch.Generator().manual_seed(7))
    state = _state(batch, 8)
    state.fin_scores[:, :2] = -3.0  # some finished hypotheses to compete with
    state.fin_done[:, :2] = True
    rows = [
        step_scalars(2, 10, 1.0, False),
        step_scalars(4, 5, -0.5, False),  # its last step
        step_scalars(3, 6, 2.0, False),
    ]
    spec = _spec(K, False, step=2)
    together = expand(spec, _inputs(hidden, state, 0, rows), head, VOCAB)
    assert bool(together.state.fin_done.any())
    for b in range(batch):
        part = hidden[b * K : (b + 1) * K]
        alone = expand(spec, _inputs(part, state.row(b), 0, rows[b : b + 1]), head, VOCAB)
        assert torch.equal(alone.ints[0], together.ints[b])
        assert torch.equal(alone.flags[0], together.flags[b])
        assert torch.equal(alone.request_flags[0], together.request_flags[b])
        torch.testing.assert_close(alone.floats[0], together.floats[b], rtol=0, atol=0)
    same = expand(spec, _inputs(hidden, state, 0, [rows[0]] * batch), head, VOCAB)
    assert not torch.equal(same.floats, together.floats)  # the rows did differ


def test_first_step_rows_share_the_prompt_state() -> None:
    head = _head(3)
    hidden = torch.randn(2, HIDDEN, generator=torch.Generator().manual_seed(4))
    state = BeamState.initial(2, K, torch.device("cpu"))
    out = expand(_spec(1, False, step=0), _inputs(hidden, state, 0), head, VOCAB)
    assert torch.equal(out.parents, torch.zeros(2, K, dtype=torch.int64))  # all from row 0
    assert not bool(out.state.running_ghost.any())
    wide = expand(_spec(1, True, step=0), _inputs(hidden[:1], state.row(0), 0), head, VOCAB)
    assert torch.equal(wide.tokens[0], out.tokens[0])
    assert not bool((out.tokens == 7).any())  # EOS is blocked before min_new_tokens


def test_packed_outputs_round_trip_the_state() -> None:
    state = _state(3, 5)
    state.fin_step = torch.arange(3 * K).view(3, K)
    state.fin_done = state.running_scores < -2.5
    packed = StepOutputs.empty(4, K, torch.device("cpu"))
    packed.load_state(state)
    for name in BeamState.__dataclass_fields__:
        assert torch.equal(getattr(packed.state, name)[:3], getattr(state, name)), name
    again = StepOutputs.empty(3, K, torch.device("cpu"))
    again.load(packed.head(3))
    assert torch.equal(again.floats, packed.floats[:3])
