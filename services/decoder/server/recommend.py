"""Recommend: a history of items -> a SID-constrained beam request -> distinct catalog items.

The history, the trie walked and the returned items all come from one catalog version: the one
the engine pins. `RecommendCall` is the `Prepare` callback the engine thread calls with the
catalogs current at admission; the caller's thread maps the history beforehand
(`prepare_ahead`, against the catalogs current at the call: a history that does not map there,
or an unknown catalog, is refused at once), and the engine thread takes that request when the
version it pins is the one it was built against, and maps the history again otherwise (a
catalog swapped in between). The mapping then runs beside the engine thread's device waits
instead of on that thread, which at small widths sets the pace, and a bad request never
reaches that thread.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from widebeam.services.catalog.default_name import DEFAULT_CATALOG
from widebeam.services.catalog.sid_layout import SidLayout
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2 as pb
from widebeam.services.decoder.requests.results import RequestOutput
from widebeam.services.decoder.requests.spec import GenerationRequest, Normalization, RequestError
from widebeam.services.decoder.server.async_types import RequestWork
from widebeam.services.decoder.server.convert import normalization_of
from widebeam.services.decoder.server.prompting import (
    history_prompt,
    level_bounds,
    sid_of_tokens,
)
from widebeam.services.decoder.server.request_limits import RequestLimits

if TYPE_CHECKING:
    from widebeam.services.decoder.server.served_catalog import ServedCatalog

DEFAULT_N = 10


@dataclass(frozen=True)
class RecommendSpec:
    catalog: str
    n: int
    beam_width: int
    history_items: tuple[str, ...]
    history_sids: tuple[tuple[int, ...], ...]
    exclude: frozenset[str]
    skip_unknown: bool
    length_penalty: float
    normalization: Normalization


def parse_recommend(msg: pb.RecommendRequest) -> RecommendSpec:
    if len(msg.history_item_ids) and len(msg.history_sids):
        raise RequestError("give the history as history_item_ids or as history_sids, not both")
    n = msg.n if msg.HasField("n") else DEFAULT_N
    if n < 1:
        raise RequestError(f"n must be >= 1, got {n}")
    beam_width = msg.beam_width if msg.HasField("beam_width") else n
    if not 1 <= n <= beam_width:
        raise RequestError(f"n must be in 1..beam_width ({beam_width}), got {n}")
    empty = [i for i, item in enumerate(msg.history_item_ids) if not item]
    if empty:
        raise RequestError(f"history_item_ids has empty ids at positions {empty[:10]}")
    return RecommendSpec(
        catalog=msg.catalog or DEFAULT_CATALOG,
        n=n,
        beam_width=beam_width,
        history_items=tuple(msg.history_item_ids),
        history_sids=tuple(tuple(sid.codes) for sid in msg.history_sids),
        exclude=frozenset(msg.exclude_item_ids),
        skip_unknown=msg.skip_unknown_items,
        length_penalty=msg.length_penalty if msg.HasField("length_penalty") else 1.0,
        normalization=normalization_of(msg.normalization),
    )


def recommend_work(
    spec: RecommendSpec, catalogs: Mapping[str, ServedCatalog]
) -> RequestWork | None:
    """Its rows and (at most) steps, for admission by predicted wait: a full SID path, the
    begin token included; None for an unknown catalog (the call fails on that anyway)."""
    served = catalogs.get(spec.catalog)
    if served is None:
        return None
    return RequestWork(spec.beam_width, served.constraint.path_length(()))


@dataclass(frozen=True)
class RecommendAnswer:
    """A Recommend call's engine output and what its response names: the catalog version the
    history was resolved in (the one the engine pinned), its layout, the skipped history ids."""

    spec: RecommendSpec
    out: RequestOutput
    catalog: str
    version: str
    layout: SidLayout
    skipped: tuple[str, ...]


@dataclass(frozen=True)
class _Prepared:
    """A request built against `served`, and the history ids it skipped."""

    served: ServedCatalog
    request: GenerationRequest
    skipped: list[str]


@dataclass
class RecommendCall:
    """`Prepare` callback: builds the engine request and remembers the catalog it used."""

    spec: RecommendSpec
    limits: RequestLimits
    pinned: ServedCatalog | None = None
    skipped: list[str] = field(default_factory=list)
    _ahead: _Prepared | None = field(default=None, init=False, repr=False)

    def prepare_ahead(self, catalogs: Mapping[str, ServedCatalog]) -> None:
        """Build the request now, on the caller's thread, against `catalogs` (the call then
        takes it if the engine pins the same version). A request that cannot be built
        against them is refused here (RequestError), without the engine thread."""
        served = self._served(catalogs)
        try:
            request, skipped = self._build(served)
        except RequestError:
            raise
        except Exception:  # a fault: the engine thread builds again and reports it
            return
        self._ahead = _Prepared(served, request, skipped)

    def __call__(self, catalogs: Mapping[str, ServedCatalog]) -> GenerationRequest:
        served = self._served(catalogs)
        # Dropped here: a version swapped out must not be kept alive by the request's call.
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead.served is served:
            request, skipped = ahead.request, ahead.skipped
        else:
            request, skipped = self._build(served)
        self.pinned, self.skipped = served, skipped
        return request

    def _served(self, catalogs: Mapping[str, ServedCatalog]) -> ServedCatalog:
        served = catalogs.get(self.spec.catalog)
        if served is None:
            loaded = ", ".join(sorted(catalogs)) or "none"
            raise RequestError(f"unknown catalog {self.spec.catalog!r}; loaded: {loaded}")
        return served

    def _build(self, served: ServedCatalog) -> tuple[GenerationRequest, list[str]]:
        """The engine request against `served`, and the unknown history ids it skipped."""
        spec = self.spec
        sids: list[tuple[int, ...]] | np.ndarray = list(spec.history_sids)
        skipped: list[str] = []
        if spec.history_items:
            sids, unknown = served.index.resolve_rows(spec.history_items)  # [known, L] int32
            if unknown and not spec.skip_unknown:
                shown = ", ".join(repr(u) for u in unknown[:10])
                more = f" (+{len(unknown) - 10} more)" if len(unknown) > 10 else ""
                raise RequestError(
                    f"history has {len(unknown)} item id(s) not in catalog {served.name!r} "
                    f"version {served.version}: {shown}{more} (set skip_unknown_items to drop them)"
                )
            skipped = unknown
        try:
            prompt = history_prompt(served.layout, sids)
        except ValueError as exc:
            raise RequestError(f"history_sids: {exc}") from None
        if not prompt:
            raise RequestError(
                "history is empty and the SID layout has no begin token to start from"
            )
        self.limits.check_prompt(len(prompt), "the history's prompt")
        # No EOS: a complete SID path ends the beam, saving the forward that would emit EOS.
        request = GenerationRequest(
            request_id="",
            input_ids=tuple(prompt),
            beam_width=spec.beam_width,
            n=spec.beam_width,
            max_new_tokens=served.constraint.path_length(tuple(prompt)),
            length_penalty=spec.length_penalty,
            eos_token_id=(),
            constrained=True,
            catalog=spec.catalog,
            normalization=spec.normalization,
        )
        return request, skipped

    def answer(self, out: RequestOutput) -> RecommendAnswer:
        served = self.pinned
        assert served is not None and out.catalog_version == served.version
        return RecommendAnswer(
            self.spec, out, served.name, served.version, served.layout, tuple(self.skipped)
        )


def recommend_response(answer: RecommendAnswer, request_id: str) -> pb.RecommendResponse:
    spec, out, bounds = answer.spec, answer.out, level_bounds(answer.layout)
    response = pb.RecommendResponse(
        request_id=request_id,
        catalog=pb.CatalogRef(name=answer.catalog, version=answer.version),
        usage=pb.Usage(
            prompt_tokens=out.prompt_tokens,
            completion_tokens=sum(len(b.output_ids) for b in out.beams),
            cached_prompt_tokens=out.cached_prompt_tokens,
        ),
        beams_returned=len(out.beams),
        skipped_history_item_ids=answer.skipped,
    )
    # Items are added in place (`add`): building each as its own message and copying the list
    # in takes about twice as long, on the thread the engine shares the GIL with.
    add = response.items.add
    count = 0
    seen: set[str] = set()
    for beam in out.beams:  # best first; items of one SID in catalog order
        if count == spec.n:
            break
        codes = sid_of_tokens(bounds, beam.output_ids) or ()
        for item in beam.item_ids or ():
            if item in seen or item in spec.exclude:
                continue
            seen.add(item)
            entry = add(item_id=item, score=beam.score)
            if codes:  # extending the codes marks the SID present, as SetInParent does
                entry.sid.codes.extend(codes)
            else:
                entry.sid.SetInParent()
            count += 1
            if count == spec.n:
                break
    response.exhausted = count < spec.n
    return response
