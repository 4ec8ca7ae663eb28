"""Protobuf <-> engine types for Generate and GetInfo. Malformed fields raise RequestError;
the engine's own validation covers the rest (ranges, limits, catalog)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from widebeam.services.catalog.default_name import DEFAULT_CATALOG
from widebeam.services.catalog.sid_layout import SidLayout
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2 as pb
from widebeam.services.decoder.requests.results import RequestOutput
from widebeam.services.decoder.requests.spec import (
    EarlyStopping,
    GenerationRequest,
    Normalization,
    RequestError,
)

if TYPE_CHECKING:
    from widebeam.services.decoder.server.served_catalog import ServedCatalog

_EARLY_STOPPING: dict[int, EarlyStopping] = {
    pb.EARLY_STOPPING_UNSPECIFIED: False,
    pb.EARLY_STOPPING_FALSE: False,
    pb.EARLY_STOPPING_TRUE: True,
    pb.EARLY_STOPPING_NEVER: "never",
}
_NORMALIZATION: dict[int, Normalization] = {
    pb.NORMALIZATION_UNSPECIFIED: Normalization.VOCAB,
    pb.NORMALIZATION_VOCAB: Normalization.VOCAB,
    pb.NORMALIZATION_SID: Normalization.SID,
}
_FINISH = {"stop": pb.FINISH_REASON_STOP, "length": pb.FINISH_REASON_LENGTH}
# proto field -> GenerationRequest field, for `optional` fields copied only when present.
_OPTIONAL = (
    "beam_width",
    "n",
    "max_new_tokens",
    "min_new_tokens",
    "length_penalty",
    "temperature",
    "top_p",
    "top_k",
    "seed",
)


def generation_request(msg: pb.GenerateRequest) -> GenerationRequest:
    early = _EARLY_STOPPING.get(msg.early_stopping)
    if early is None:
        raise RequestError(f"early_stopping: unknown enum value {msg.early_stopping}")
    normalization = normalization_of(msg.normalization)
    if not msg.custom_eos and len(msg.eos_token_ids):
        raise RequestError(
            "eos_token_ids given without custom_eos=true (set custom_eos to replace the "
            "model's EOS ids; an empty list with custom_eos=true means no EOS)"
        )
    kwargs = {name: getattr(msg, name) for name in _OPTIONAL if msg.HasField(name)}
    return GenerationRequest(
        request_id=msg.request_id,
        input_ids=tuple(msg.input_ids),
        early_stopping=early,
        eos_token_id=tuple(msg.eos_token_ids) if msg.custom_eos else None,
        ignore_eos=msg.ignore_eos,
        constrained=msg.constrained,
        catalog=msg.catalog or None,
        return_logprobs=msg.return_logprobs,
        normalization=normalization,
        **kwargs,
    )


def normalization_of(value: int) -> Normalization:
    """The engine's name for a `Normalization` enum value (Generate and Recommend)."""
    normalization = _NORMALIZATION.get(value)
    if normalization is None:
        raise RequestError(
            f"normalization: unknown enum value {value} (expected NORMALIZATION_VOCAB or "
            "NORMALIZATION_SID)"
        )
    return normalization


def generate_response(
    request_id: str, catalog: str | None, out: RequestOutput
) -> pb.GenerateResponse:
    response = pb.GenerateResponse(
        request_id=request_id,
        usage=pb.Usage(
            prompt_tokens=out.prompt_tokens,
            completion_tokens=sum(len(b.output_ids) for b in out.beams),
            cached_prompt_tokens=out.cached_prompt_tokens,
        ),
    )
    # Beams are added in place and filled field by field, on the thread the engine shares the
    # GIL with: a message built apart and copied in costs about 1.5x, and keyword arguments
    # about 2x (the empty logprobs / item_ids sequences alone are half of that).
    add = response.beams.add
    for beam in out.beams:
        entry = add()
        entry.output_ids.extend(beam.output_ids)
        entry.score = beam.score
        entry.cum_logprob = beam.cum_logprob
        entry.finish_reason = _FINISH[beam.finish_reason]
        if beam.logprobs:
            entry.logprobs.extend(beam.logprobs)
        if beam.item_ids:
            entry.item_ids.extend(beam.item_ids)
    if out.catalog_version is not None:
        response.catalog.CopyFrom(
            pb.CatalogRef(name=catalog or DEFAULT_CATALOG, version=out.catalog_version)
        )
    return response


def layout_info(layout: SidLayout) -> pb.SidLayout:
    return pb.SidLayout(
        spec=layout.to_spec(),
        levels=[pb.SidLevel(base=lv.base, size=lv.size) for lv in layout.levels],
        begin_token_id=layout.begin_token_id,
        end_token_id=layout.end_token_id,
    )


def catalog_info(served: ServedCatalog) -> pb.CatalogInfo:
    trie = served.constraint.trie
    return pb.CatalogInfo(
        name=served.name, version=served.version, num_items=trie.num_items, num_sids=trie.num_sids
    )
