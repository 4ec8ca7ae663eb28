"""`stage_on_host`: one `HostStep` per request, each the views of its own row of the cohort's
host copies (what indexing row by row gave)."""

from __future__ import annotations

import pytest
import torch

from tests.services.decoder.search.random_outputs import random_step_outputs
from widebeam.services.decoder.search.beam_host_step import HostStep, stage_on_host


@pytest.mark.parametrize(("batch", "k"), [(1, 1), (3, 5), (17, 50)])
def test_each_request_gets_its_rows(batch: int, k: int) -> None:
    outputs = random_step_outputs(batch, k, seed=batch)
    hosts = stage_on_host(outputs)
    assert len(hosts) == batch
    for b, host in enumerate(hosts):
        assert isinstance(host, HostStep)
        old = HostStep(outputs.ints[b], outputs.floats[b])  # the row-by-row indexing
        for got, want in zip(host, old, strict=True):
            assert got.shape == want.shape and got.stride() == want.stride()
            assert got.dtype == want.dtype and torch.equal(got, want)
            # views, no copy: on the CPU the host copies are the outputs themselves
            assert got.data_ptr() == want.data_ptr()
        ints, floats = (t.numpy() for t in host)  # what BeamSearch.results reads
        assert (ints == outputs.ints[b].numpy()).all()
        assert (floats == outputs.floats[b].numpy()).all()


def test_an_empty_cohort_has_no_steps() -> None:
    assert stage_on_host(random_step_outputs(0, 4, seed=0)) == []
