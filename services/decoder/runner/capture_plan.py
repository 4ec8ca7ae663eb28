"""Which CUDA graphs the decoder captures at start-up, before it reports ready: a plain-Python
function of the engine configuration, so CI checks the list on a CPU stand-in.

A decode step's graph is keyed by its row bucket (`decode_graphs.row_bucket`) and a prefill's by
its token bucket (`prefill_graphs.TOKEN_STEP` multiples up to the prefill graph limit). The
list holds every row bucket up to `max_rows` (or `max_capture_rows`), every prefill token
bucket, and the lockstep batches of the `capture_beam_widths` (and of their first widening);
the engine's warm-up runs synthetic requests per entry (`Engine.warm_up`), which capture that
bucket's graphs (a wide beam's streamed expansion with them), then the attention buckets the
backend lists for each row bucket. What serving meets beyond the list is still captured,
lazily, and counted (`capture_counts.CaptureCounts`).
"""

from __future__ import annotations

from typing import NamedTuple

from widebeam.services.decoder.config import EngineConfig, is_cuda_device
from widebeam.services.decoder.requests.spec import GenerationRequest
from widebeam.services.decoder.runner.capture_counts import GraphKind
from widebeam.services.decoder.runner.decode_graphs import row_bucket
from widebeam.services.decoder.runner.expansion_graphs import BATCH_STEP, EXACT_BATCH, MAX_COHORT
from widebeam.services.decoder.runner.prefill_graphs import (
    TOKEN_STEP,
    largest_bucket,
    prompt_capacity,
)

WIDENED_LOCKSTEP = 2  # widened Recommend calls stepping together that get start-up graphs


class CaptureBucket(NamedTuple):
    kind: GraphKind
    size: int  # decode: padded rows; prefill: padded prompt tokens; expansion: beam width
    requests: int = 1  # expansion: requests stepping in lockstep
    # expansion: the OpenAI routes' shape (the path, then the model's EOS) instead of Recommend's
    # (no EOS): a beam step's graph is keyed by the EOS ids it ranks
    eos: bool = False


def prefill_graph_tokens(config: EngineConfig) -> int:
    """The largest prefill batch (prompt tokens) run at bucketed shapes; 0: none."""
    if not config.prefill_graphs:
        return 0
    return min(config.max_prefill_tokens, config.max_prefill_graph_tokens)


def captures_graphs(config: EngineConfig) -> bool:
    """Whether this configuration replays CUDA graphs at all (the torch attention backend has
    no graph hooks; CPU has no graphs)."""
    graph_backend = config.attention_backend != "torch"
    return is_cuda_device(config.device) and config.cuda_graphs and graph_backend


def decode_row_buckets(config: EngineConfig) -> list[int]:
    """Every decode row bucket a step of up to `max_capture_rows` (default `max_rows`) rows
    falls in, smallest first."""
    limit = min(config.max_rows, config.max_capture_rows or config.max_rows)
    buckets: list[int] = []
    rows = 1
    while rows <= limit:
        bucket = row_bucket(rows)
        buckets.append(bucket)
        rows = bucket + 1
    if buckets and buckets[-1] < row_bucket(limit):
        buckets.append(row_bucket(limit))
    return buckets


def prefill_token_buckets(config: EngineConfig) -> list[int]:
    """Every prefill token bucket: each holds one graph, whatever the batch's prompt count."""
    return list(range(TOKEN_STEP, largest_bucket(prefill_graph_tokens(config)) + 1, TOKEN_STEP))


def expansion_batches(config: EngineConfig) -> list[CaptureBucket]:
    """Each of `capture_beam_widths` at its lockstep batch buckets (`lockstep_counts`), as far
    as `max_rows` holds them; then each width's first widening (`widened_batches`)."""
    declared = [
        CaptureBucket(GraphKind.EXPANSION, width, requests, eos)
        for width in config.capture_beam_widths
        for requests in lockstep_counts(width, config.max_rows)
        for eos in (False, True)
    ]
    return declared + widened_batches(config)


def lockstep_counts(width: int, max_rows: int) -> list[int]:
    """One request count per expansion batch bucket a cohort of `width`-beams can fall in:
    every count up to `EXACT_BATCH` (each its own graph), then each `BATCH_STEP` bucket up to
    `MAX_COHORT` (a busy server's cohorts: more than 16 n = 50 requests step together at twice
    a W3 server's capacity); larger cohorts run as batches of `MAX_COHORT`."""
    most = max_rows // width
    exact = list(range(1, min(EXACT_BATCH, most) + 1))
    first_rounded = EXACT_BATCH + BATCH_STEP
    rounded = [
        min(bucket, most)  # falls in `bucket`: more than bucket - BATCH_STEP requests
        for bucket in range(first_rounded, MAX_COHORT + 1, BATCH_STEP)
        if bucket - BATCH_STEP < most
    ]
    return exact + rounded


def widened_batches(config: EngineConfig) -> list[CaptureBucket]:
    """The gateway asks a Recommend again at twice its beam when excluded items left it short
    of `n` (`gateway.recommender`): the first widening of each declared width, Recommend's
    shape, alone or two in lockstep (widenings are occasional, so rarely more at once; more,
    and later doublings, are captured when first met)."""
    widths = sorted({2 * w for w in config.capture_beam_widths} - set(config.capture_beam_widths))
    return [
        CaptureBucket(GraphKind.EXPANSION, width, requests)
        for width in widths
        for requests in range(1, min(WIDENED_LOCKSTEP, config.max_rows // width) + 1)
    ]


def startup_captures(config: EngineConfig) -> tuple[CaptureBucket, ...]:
    """The buckets captured before ready; empty when the configuration has no graphs or
    `capture_at_start` is off."""
    if not (config.capture_at_start and captures_graphs(config)):
        return ()
    decode = [CaptureBucket(GraphKind.DECODE, rows) for rows in decode_row_buckets(config)]
    prefill = [CaptureBucket(GraphKind.PREFILL, t) for t in prefill_token_buckets(config)]
    return tuple(decode + prefill + expansion_batches(config))


def warm_up_requests(
    bucket: CaptureBucket,
    config: EngineConfig,
    max_model_len: int,
    sid_path_length: int | None = None,  # the default catalog's path from the prompt (0,)
) -> list[GenerationRequest]:
    """Synthetic requests, run together, whose steps fall in `bucket`. Decode: a beam as wide
    as the bucket's rows, shaped like a Recommend call (n = beam, no EOS; constrained to the
    default catalog when one is loaded, so a Recommend of that width finds its beam expansions
    captured too), else two unconstrained steps. Expansion: `requests` such beams of the
    bucket's width, which step in lockstep; with `eos`, shaped like a constrained chat
    completion instead (the model's EOS, one token more than the path). Prefill: prompts that
    fill the bucket's tokens together (one prefill batch), each within the context length, one
    token each."""
    no_eos: tuple[int, ...] = ()
    name = f"warm-up-{bucket.kind}-{bucket.size}x{bucket.requests}{'-eos' * bucket.eos}"
    if bucket.kind == GraphKind.PREFILL:
        tokens = min(bucket.size, prefill_graph_tokens(config))
        longest = max_model_len - 1
        # no more prompts than the bucket holds beside its padding segment
        count = min(-(-tokens // longest), prompt_capacity(bucket.size) - 1)
        return [
            GenerationRequest(
                f"{name}-{i}", (0,) * min(longest, tokens - i * longest), max_new_tokens=1,
                eos_token_id=no_eos,
            )
            for i in range(count)
        ]  # fmt: skip
    width = min(bucket.size, config.max_rows)
    constrained = sid_path_length is not None
    steps = (sid_path_length or 2) + bucket.eos
    eos = None if bucket.eos else no_eos  # None: the model's
    return [
        GenerationRequest(
            f"{name}-{i}", (0,), beam_width=width, n=width, max_new_tokens=steps,
            eos_token_id=eos, constrained=constrained,
        )
        for i in range(bucket.requests)
    ]  # fmt: skip
