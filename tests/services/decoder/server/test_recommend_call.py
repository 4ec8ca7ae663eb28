"""`RecommendCall`: the history is mapped on the caller's thread ahead of the engine thread
(`prepare_ahead`, which refuses a history that does not map), and the engine thread takes that
request only when the version it pins is the one it was built against; after a swap it maps
the history again, so the history, the trie and the answer's items still come from one
version."""

from __future__ import annotations

import random
import sys

import pytest

from tests.services.catalog.test_trie import make_layout
from widebeam.services.catalog.trie import CatalogEntry, SidTrie
from widebeam.services.decoder.requests.spec import Normalization, RequestError
from widebeam.services.decoder.server.recommend import RecommendCall, RecommendSpec
from widebeam.services.decoder.server.request_limits import RequestLimits
from widebeam.services.decoder.server.served_catalog import ServedCatalog

LEVELS = [16, 16, 16]
LIMITS = RequestLimits(
    max_beam_width=64, max_n=64, max_prompt_tokens=512, max_history_items=100,
    max_exclude_ids=100, max_eos_token_ids=1000,
)  # fmt: skip


def _served(version: str, items: list[str], seed: int) -> ServedCatalog:
    rng = random.Random(seed)
    entries = [CatalogEntry(item, tuple(rng.randrange(s) for s in LEVELS)) for item in items]
    trie = SidTrie.build(entries, make_layout(LEVELS, begin=True, end=True))
    return ServedCatalog.build("default", trie, version, "cpu")


def _spec(history: tuple[str, ...], skip_unknown: bool = False) -> RecommendSpec:
    return RecommendSpec(
        catalog="default", n=4, beam_width=8, history_items=history, history_sids=(),
        exclude=frozenset(), skip_unknown=skip_unknown, length_penalty=1.0,
        normalization=Normalization.VOCAB,
    )  # fmt: skip


OLD = _served("1", [f"item-{i}" for i in range(40)], seed=1)
# the same ids at other SIDs, and one more
NEW = _served("2", [f"item-{i}" for i in range(41)], seed=2)


def _no_second_build(*_args: object) -> None:
    raise AssertionError("built again on the engine thread")


def test_the_request_built_ahead_is_taken_for_the_same_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    call = RecommendCall(_spec(("item-3", "item-7", "gone"), skip_unknown=True), LIMITS)
    call.prepare_ahead({"default": OLD})
    monkeypatch.setattr(call, "_build", _no_second_build)
    request = call({"default": OLD})
    assert request == RecommendCall(call.spec, LIMITS)({"default": OLD})
    assert call.pinned is OLD and call.skipped == ["gone"]


def test_a_swap_in_between_maps_the_history_again() -> None:
    spec = _spec(("item-3", "item-7", "item-40"), skip_unknown=True)
    call = RecommendCall(spec, LIMITS)
    call.prepare_ahead({"default": OLD})  # item-40 is not in version 1
    request = call({"default": NEW})
    assert request == RecommendCall(spec, LIMITS)({"default": NEW})
    assert request != RecommendCall(spec, LIMITS)({"default": OLD})  # other SIDs in version 2
    assert call.pinned is NEW and call.skipped == []


def test_a_history_that_does_not_map_is_refused_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _spec(("item-3", "item-40"))  # unknown in version 1, known in 2
    call = RecommendCall(spec, LIMITS)
    with pytest.raises(RequestError, match="not in catalog 'default' version 1"):
        call.prepare_ahead({"default": OLD})
    assert call.pinned is None
    known = RecommendCall(spec, LIMITS)
    known.prepare_ahead({"default": NEW})
    monkeypatch.setattr(known, "_build", _no_second_build)
    assert known({"default": NEW}).input_ids and known.pinned is NEW


def test_an_unknown_catalog_is_refused_ahead_and_by_the_call() -> None:
    call = RecommendCall(_spec(("item-3",)), LIMITS)
    for attempt in (call.prepare_ahead, call):
        with pytest.raises(RequestError, match="unknown catalog 'default'; loaded: none"):
            attempt({})


def test_the_call_keeps_no_version_it_did_not_pin() -> None:
    swapped_out = _served("3", [f"item-{i}" for i in range(40)], seed=3)
    call = RecommendCall(_spec(("item-3",)), LIMITS)
    call.prepare_ahead({"default": swapped_out})
    before = sys.getrefcount(swapped_out)
    call({"default": NEW})
    assert call.pinned is NEW
    assert sys.getrefcount(swapped_out) < before  # the request built against it is gone
