"""The `normalization` request field (the engine's `Normalization`): what its values mean, and
the gRPC enum each becomes. Shared by the OpenAI routes, `/v1/recommend` and the batch rows."""

from __future__ import annotations

from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2 as pb
from widebeam.services.decoder.requests.spec import Normalization

NORMALIZATION_DOC = (
    "what log-probs (scores, cum_logprob, logprobs) are normalised over: 'vocab' = the whole "
    "vocabulary, as transformers does; 'sid' = only the SID tokens (every code token of the "
    "model's SID layout and its begin/end tokens) plus the first EOS id, as if every other logit "
    "were -inf (constrained requests only; each log-prob is then >= the 'vocab' one, a "
    "documented difference from transformers' scores; a cheaper LM head)"
)
NORMALIZATION_PB: dict[Normalization, pb.Normalization] = {
    Normalization.VOCAB: pb.NORMALIZATION_VOCAB,
    Normalization.SID: pb.NORMALIZATION_SID,
}
__all__ = ["NORMALIZATION_DOC", "NORMALIZATION_PB", "Normalization"]
