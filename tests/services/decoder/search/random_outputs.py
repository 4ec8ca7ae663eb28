"""Random packed step outputs for the tests of what reads or moves them."""

from __future__ import annotations

import torch

from widebeam.services.decoder.search.beam_step_outputs import StepOutputs

CPU = torch.device("cpu")


def random_step_outputs(batch: int, k: int, seed: int) -> StepOutputs:
    """`batch` requests' [batch, ., k] outputs of random values (ints in -1..49)."""
    gen = torch.Generator().manual_seed(seed)
    empty = StepOutputs.empty(batch, k, CPU)
    return StepOutputs(
        torch.randn(empty.floats.shape, generator=gen),
        torch.randint(-1, 50, empty.ints.shape, generator=gen),
        torch.rand(empty.flags.shape, generator=gen) > 0.5,
        torch.rand(empty.request_flags.shape, generator=gen) > 0.5,
    )
