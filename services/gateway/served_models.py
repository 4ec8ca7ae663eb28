"""The names the served model answers to, and which of them decode catalog-constrained by
default: the one place the OpenAI routes resolve a request's `model` field.

The model's own name is `model_name`, else the decoders' (their model directory's name); the
decoders' name is always accepted, and `served_model_names` adds aliases (SGLang's and vLLM's
`--served-model-name`), so a client written for another server's name ("flashrec", "onerec")
works unchanged. A request without `model` is for the served model. `default_constrained`
names (or "*" for all) are the names whose requests walk the catalog trie unless they say
`constrained: false`."""

from __future__ import annotations

from dataclasses import dataclass

from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2 as pb
from widebeam.services.gateway.decoder_info import reported_model_name
from widebeam.services.gateway.settings import ALL_MODEL_NAMES, GatewaySettings
from widebeam.services.http.errors import ApiError


@dataclass(frozen=True)
class ServedModels:
    model_name: str | None
    aliases: tuple[str, ...]
    default_constrained: frozenset[str]

    @classmethod
    def from_settings(cls, settings: GatewaySettings) -> ServedModels:
        return cls(
            settings.model_name,
            tuple(settings.served_model_names),
            frozenset(settings.default_constrained),
        )

    def names(self, info: pb.GetInfoResponse | None) -> list[str]:
        """Every accepted name, the reported one first (what /v1/models lists)."""
        names = [reported_model_name(self.model_name, info), *self.aliases]
        if info is not None and info.model_name:
            names.append(info.model_name)
        return list(dict.fromkeys(names))

    def resolve(self, requested: str | None, info: pb.GetInfoResponse | None) -> str:
        """The name a response reports: the one requested, or the served model's own when
        the request names none; 404 for a name not served here, as OpenAI answers."""
        if requested is None:
            return reported_model_name(self.model_name, info)
        if self.model_name is None and info is None:
            return requested  # the model's own name is not known yet: nothing to check against
        names = self.names(info)
        if requested not in names:
            raise ApiError(
                404,
                f"model {requested!r} is not served here; available: {', '.join(names)}",
                "model_not_found",
                param="model",
            )
        return requested

    def constrained_by_default(self, name: str) -> bool:
        return ALL_MODEL_NAMES in self.default_constrained or name in self.default_constrained
