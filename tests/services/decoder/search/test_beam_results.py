"""`BeamSearch.results` traces each finished hypothesis back through the host copies of its
steps exactly as a per-hypothesis walk does, whether all end at the last step or not."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from widebeam.services.decoder.requests.results import FinishedBeams
from widebeam.services.decoder.search.beam_host_step import HostStep
from widebeam.services.decoder.search.beam_search import BeamSearch
from widebeam.services.decoder.search.beam_step_outputs import FloatRow, IntRow


def _search(rng: np.random.Generator, k: int, steps: int, uniform: bool) -> BeamSearch:
    search = BeamSearch(k, max(1, k - 1), 1.0, False, torch.tensor([3]), steps, torch.device("cpu"))
    for step in range(steps):
        ints = torch.from_numpy(rng.integers(0, k, (len(IntRow), k)))
        ints[IntRow.TOKENS] = torch.from_numpy(rng.integers(0, 1000, k))
        floats = torch.from_numpy(rng.standard_normal((len(FloatRow), k)).astype(np.float32))
        if step == steps - 1:
            last = np.full(k, steps - 1) if uniform else rng.integers(0, steps, k)
            ints[IntRow.FIN_STEP] = torch.from_numpy(last)
            ints[IntRow.FIN_TOKEN] = torch.from_numpy(rng.integers(0, 1000, k))
            ints[IntRow.RETURNABLE] = torch.from_numpy(rng.integers(0, 2, k))
        search.host_steps.append(HostStep(ints, floats))
    return search


def _walked(search: BeamSearch, with_logprobs: bool) -> FinishedBeams:
    """Each returnable slot traced alone, step by step."""
    fin_ints, fin_floats = (t.numpy() for t in search.host_steps[-1])
    tokens, lps, scores, cums = [], [], [], []
    for slot in range(search.num_return):
        if not fin_ints[IntRow.RETURNABLE, slot]:
            continue
        last = int(fin_ints[IntRow.FIN_STEP, slot])
        seq = [int(fin_ints[IntRow.FIN_TOKEN, slot])]
        seq_lps = [float(fin_floats[FloatRow.FIN_TOKEN_LOGPROB, slot])]
        row = int(fin_ints[IntRow.FIN_PARENT, slot])
        for step in range(last - 1, -1, -1):
            ints, floats = (t.numpy() for t in search.host_steps[step])
            seq.insert(0, int(ints[IntRow.TOKENS, row]))
            seq_lps.insert(0, float(floats[FloatRow.LOGPROBS, row]))
            row = int(ints[IntRow.PARENTS, row])
        tokens.append(seq)
        lps.append(seq_lps)
        scores.append(float(fin_floats[FloatRow.FIN_SCORES, slot]))
        cums.append(float(fin_floats[FloatRow.FIN_CUM, slot]))
    if not tokens:
        return FinishedBeams.empty()
    paths = np.full((len(tokens), max(map(len, tokens))), -1, dtype=np.int64)
    for i, seq in enumerate(tokens):
        paths[i, : len(seq)] = seq
    return FinishedBeams(tokens, lps if with_logprobs else None, scores, cums, paths)


@pytest.mark.parametrize("uniform", [True, False], ids=["all-at-last-step", "ragged"])
@pytest.mark.parametrize("with_logprobs", [False, True])
def test_results_equal_a_per_hypothesis_trace(uniform: bool, with_logprobs: bool) -> None:
    rng = np.random.default_rng(int(uniform) * 2 + int(with_logprobs))
    for trial in range(40):
        search = _search(rng, k=int(rng.integers(1, 9)), steps=int(rng.integers(1, 6)),
                         uniform=uniform)  # fmt: skip
        got, expected = search.results(with_logprobs), _walked(search, with_logprobs)
        assert got[:4] == expected[:4], trial
        assert got.paths.dtype == np.int64
        np.testing.assert_array_equal(got.paths, expected.paths)


def test_results_of_no_steps_are_empty() -> None:
    search = BeamSearch(2, 2, 1.0, False, torch.tensor([3]), 4, torch.device("cpu"))
    assert search.results().tokens == [] and search.results().paths.shape == (0, 0)
