"""`decode_inputs` lays a step's requests out back to back: tokens, positions, write slots and
one attention group per request, whatever each request's width and step."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from widebeam.services.decoder.runner.decode_inputs import decode_inputs


def _request(width: int, prompt_len: int, steps: int, seed: int) -> SimpleNamespace:
    """What `decode_inputs` reads of a running request that has taken `steps` steps."""
    gen = torch.Generator().manual_seed(seed)
    return SimpleNamespace(
        num_rows=width,
        prompt_len=prompt_len,
        prompt_slots=torch.randint(0, 1000, (prompt_len,), generator=gen),
        suffix_table=torch.randint(0, 1000, (width, steps), generator=gen),
        pending_tokens=torch.randint(0, 100, (width,), generator=gen),
        search=SimpleNamespace(step=steps),
    )


def test_rows_of_requests_of_different_widths_and_steps() -> None:
    states = [_request(3, 10, 1, 0), _request(1, 0, 4, 1), _request(5, 7, 2, 2)]
    inputs = decode_inputs(states, torch.device("cpu"))  # type: ignore[arg-type]
    assert torch.equal(inputs.tokens, torch.cat([s.pending_tokens for s in states]))
    assert inputs.positions.dtype == torch.int64
    # each row's pending token is generated token `step - 1`, after the prompt
    assert inputs.positions.tolist() == [10] * 3 + [3] + [8] * 5
    assert torch.equal(inputs.write_slots, torch.cat([s.suffix_table[:, -1] for s in states]))
    starts = [group.row_start for group in inputs.batch.groups]
    assert starts == [0, 3, 4]
    for group, state in zip(inputs.batch.groups, states, strict=True):
        assert group.num_rows == state.num_rows
        assert group.prompt_slots is state.prompt_slots
        assert group.suffix_slots is state.suffix_table


def test_one_request() -> None:
    state = _request(4, 300, 1, 3)
    inputs = decode_inputs([state], torch.device("cpu"))  # type: ignore[list-item]
    assert inputs.positions.tolist() == [300] * 4
    assert torch.equal(inputs.write_slots, state.suffix_table[:, 0])
    assert len(inputs.batch.groups) == 1
