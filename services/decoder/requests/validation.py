"""Request checks against the model, the engine limits and the loaded catalog.

Every problem becomes a `RequestError` with a message that names the field, before anything is
reserved, so a bad request never disturbs the others.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from widebeam.services.decoder.requests.spec import (
    GenerationRequest,
    Normalization,
    RequestError,
    normalization_from,
)

# len ** length_penalty must stay a finite float for any length the engine can reach.
MAX_LENGTH_PENALTY = 20.0
# Sampling divides fp32 logits by the temperature: below this they overflow to inf and the
# sampler fails (an INTERNAL error for a bad request). Anything smaller is greedy in effect.
MIN_TEMPERATURE = 1e-6


@dataclass(frozen=True)
class EngineLimits:
    vocab_size: int
    max_model_len: int
    max_rows: int
    max_kv_slots: int
    default_eos_ids: tuple[int, ...]


@dataclass(frozen=True)
class ResolvedRequest:
    spec: GenerationRequest
    eos_ids: tuple[int, ...]  # the ids that end a sequence (empty with ignore_eos)
    kv_slots: int  # prompt + k * max_new_tokens, reserved at admission


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise RequestError(message)


def validate_request(
    req: GenerationRequest,
    limits: EngineLimits,
    constraint_path_length: int | None,
) -> ResolvedRequest:
    """`constraint_path_length`: tokens of a complete SID path for this prompt (None when no
    catalog is loaded)."""
    k = req.beam_width
    _check(isinstance(k, int) and k >= 1, f"beam_width must be an integer >= 1, got {k!r}")
    _check(k <= limits.max_rows, f"beam_width {k} exceeds this engine's max_rows {limits.max_rows}")
    _check(
        isinstance(req.n, int) and 1 <= req.n <= k,
        f"n must be in 1..beam_width ({k}), got {req.n!r}",
    )
    _check(len(req.input_ids) > 0, "input_ids is empty: the prompt needs at least one token")
    bad = [t for t in req.input_ids if not isinstance(t, int) or not 0 <= t < limits.vocab_size]
    _check(
        not bad, f"input_ids has ids outside the vocabulary 0..{limits.vocab_size - 1}: {bad[:5]}"
    )
    _check(req.max_new_tokens >= 1, f"max_new_tokens must be >= 1, got {req.max_new_tokens}")
    _check(
        0 <= req.min_new_tokens <= req.max_new_tokens,
        f"min_new_tokens must be in 0..max_new_tokens, got {req.min_new_tokens}",
    )
    total = len(req.input_ids) + req.max_new_tokens
    _check(
        total <= limits.max_model_len,
        f"prompt ({len(req.input_ids)} tokens) + max_new_tokens ({req.max_new_tokens}) = {total} "
        f"exceeds the context length {limits.max_model_len}",
    )
    _check(
        math.isfinite(req.length_penalty) and abs(req.length_penalty) <= MAX_LENGTH_PENALTY,
        f"length_penalty must be a number in [-{MAX_LENGTH_PENALTY}, {MAX_LENGTH_PENALTY}], "
        f"got {req.length_penalty}",
    )
    _check(
        req.early_stopping in (True, False, "never"),
        f'early_stopping must be true, false or "never", got {req.early_stopping!r}',
    )
    _check_sampling(req)
    eos = limits.default_eos_ids if req.eos_token_id is None else tuple(req.eos_token_id)
    bad_eos = [t for t in eos if not isinstance(t, int) or not 0 <= t < limits.vocab_size]
    _check(not bad_eos, f"eos_token_id outside the vocabulary: {bad_eos}")
    eos = () if req.ignore_eos else tuple(dict.fromkeys(eos))
    normalization_from(req.normalization)
    _check(
        req.normalization == Normalization.VOCAB or req.constrained,
        'normalization "sid" needs a constrained request (the SID tokens come from its catalog)',
    )
    if req.constrained:
        _check_constrained(req, eos, constraint_path_length)
    kv_slots = len(req.input_ids) + k * req.max_new_tokens
    _check(
        kv_slots <= limits.max_kv_slots,
        f"request needs {kv_slots} KV slots (prompt + beam_width x max_new_tokens), more than "
        f"this engine has ({limits.max_kv_slots})",
    )
    return ResolvedRequest(req, eos, kv_slots)


def _check_sampling(req: GenerationRequest) -> None:
    sampling = bool(req.temperature)
    if req.temperature is not None:
        _check(
            math.isfinite(req.temperature)
            and (req.temperature == 0 or req.temperature >= MIN_TEMPERATURE),
            f"temperature must be >= 0 (0 = greedy; a positive one >= {MIN_TEMPERATURE:g}), "
            f"got {req.temperature}",
        )
    if req.top_p is not None:
        _check(0.0 < req.top_p <= 1.0, f"top_p must be in (0, 1], got {req.top_p}")
    if req.top_k is not None:
        _check(
            isinstance(req.top_k, int) and req.top_k >= 0, f"top_k must be >= 0, got {req.top_k}"
        )
    if sampling:
        _check(req.beam_width == 1, "sampling (temperature > 0) needs beam_width 1")


def _check_constrained(
    req: GenerationRequest, eos: tuple[int, ...], path_length: int | None
) -> None:
    _check(path_length is not None, "constrained request but no catalog is loaded")
    assert path_length is not None
    _check(
        req.max_new_tokens >= path_length,
        f"constrained request needs max_new_tokens >= {path_length} (one SID path)",
    )
    _check(
        req.min_new_tokens <= path_length,
        f"constrained request allows min_new_tokens <= {path_length}: only EOS follows a SID",
    )
    if not eos:
        _check(
            req.max_new_tokens == path_length,
            f"constrained request without EOS must have max_new_tokens == {path_length}: "
            "nothing may follow a complete SID",
        )
