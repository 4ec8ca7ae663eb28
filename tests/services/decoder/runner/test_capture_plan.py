"""The start-up capture list as a function of the configuration (CPU stand-in: the list is plain
Python, whatever device the configuration names), and the counts a capture lands in."""

from __future__ import annotations

import pytest

from widebeam.services.decoder.config import EngineConfig
from widebeam.services.decoder.runner.capture_counts import CaptureCounts, CapturePhase, GraphKind
from widebeam.services.decoder.runner.capture_plan import (
    CaptureBucket,
    lockstep_counts,
    startup_captures,
    warm_up_requests,
)
from widebeam.services.decoder.runner.decode_graphs import row_bucket
from widebeam.services.decoder.runner.expansion_graphs import batch_bucket
from widebeam.services.decoder.runner.prefill_graphs import (
    TOKEN_STEP,
    bucket_tokens,
    fits_graph,
    largest_bucket,
    prefill_shape,
    prompt_capacity,
)


def cuda_config(**overrides: object) -> EngineConfig:
    return EngineConfig(model_dir="/m", device="cuda", **overrides)  # type: ignore[arg-type]


def sizes(plan: tuple[CaptureBucket, ...], kind: GraphKind) -> list[int]:
    return [b.size for b in plan if b.kind == kind]


def test_default_config_lists_forty_graphs() -> None:
    plan = startup_captures(cuda_config())
    assert sizes(plan, GraphKind.DECODE) == [8, 16, 32, 64, 128, 256, 512, 1024]
    assert sizes(plan, GraphKind.PREFILL) == [256 * i for i in range(1, 33)]  # to 8,192
    assert len(plan) == 40


def test_every_row_count_up_to_max_rows_has_its_bucket_listed() -> None:
    for max_rows in (1, 7, 100, 1024, 1025, 5000):
        plan = sizes(startup_captures(cuda_config(max_rows=max_rows)), GraphKind.DECODE)
        assert {row_bucket(rows) for rows in range(1, max_rows + 1)} == set(plan), max_rows
        assert plan == sorted(plan)


def test_wide_engine_beyond_1024_rows_steps_by_512() -> None:
    plan = sizes(startup_captures(cuda_config(max_rows=5000)), GraphKind.DECODE)
    assert plan[-9:] == [1024, 1536, 2048, 2560, 3072, 3584, 4096, 4608, 5120]


def test_every_prefill_batch_up_to_the_graph_limit_has_its_bucket_listed() -> None:
    graph_limit = cuda_config().max_prefill_graph_tokens
    for tokens_limit in (100, 1000, 3000, 20000):
        config = cuda_config(max_prefill_tokens=tokens_limit)
        plan = sizes(startup_captures(config), GraphKind.PREFILL)
        top = min(tokens_limit, graph_limit)
        listed = {prefill_shape([t], lambda tokens, cap: None).tokens for t in range(1, top + 1)}
        assert set(plan) == listed, tokens_limit


@pytest.mark.parametrize("graph_tokens", [256, 3000, 4096])
def test_the_prefill_graph_limit_is_configurable(graph_tokens: int) -> None:
    plan = sizes(
        startup_captures(cuda_config(max_prefill_graph_tokens=graph_tokens)), GraphKind.PREFILL
    )
    # every batch of up to the limit falls in a listed bucket; no bucket starts past it
    listed = {
        prefill_shape([t], lambda tokens, cap: None).tokens for t in range(1, graph_tokens + 1)
    }
    assert set(plan) == listed and plan == sorted(plan)


def test_config_rejects_a_non_positive_prefill_graph_limit() -> None:
    with pytest.raises(ValueError, match="max_prefill_graph_tokens must be positive"):
        cuda_config(max_prefill_graph_tokens=0)


def test_max_capture_rows_limits_the_decode_buckets() -> None:
    plan = startup_captures(cuda_config(max_rows=5000, max_capture_rows=300))
    assert sizes(plan, GraphKind.DECODE) == [8, 16, 32, 64, 128, 256, 512]


@pytest.mark.parametrize(
    "overrides",
    [
        {"device": "cpu"},
        {"cuda_graphs": False},
        {"capture_at_start": False},
        {"attention_backend": "torch"},
    ],
)
def test_nothing_is_listed_without_graphs_or_when_switched_off(overrides: dict) -> None:
    config = EngineConfig(
        model_dir="/m", **({"device": "cuda", "capture_at_start": True} | overrides)
    )
    assert startup_captures(config) == ()


def test_start_up_capture_is_on_by_default() -> None:
    assert startup_captures(EngineConfig(model_dir="/m", device="cuda")) != ()
    assert startup_captures(cuda_config(capture_at_start=False)) == ()


def test_prefill_graphs_off_lists_decode_only() -> None:
    plan = startup_captures(cuda_config(prefill_graphs=False))
    assert sizes(plan, GraphKind.PREFILL) == []
    assert len(plan) == 8


def test_warm_up_requests_fall_in_their_bucket() -> None:
    config = cuda_config(max_rows=1000)
    for bucket in startup_captures(config):
        requests = warm_up_requests(bucket, config, max_model_len=4096)
        request = requests[0]
        if bucket.kind == GraphKind.DECODE:
            assert len(requests) == 1
            assert row_bucket(request.beam_width) == bucket.size
            assert request.beam_width <= config.max_rows
            assert request.max_new_tokens == 2
        else:
            lengths = [len(r.input_ids) for r in requests]
            assert max(lengths) < 4096  # within the context length
            shape = prefill_shape(lengths, lambda tokens, cap: None)
            assert shape.tokens == bucket.size == sum(lengths)  # fills it, one batch
        assert all(r.eos_token_id == () for r in requests)  # every step is taken


def test_decode_warm_ups_are_shaped_like_recommend_over_the_default_catalog() -> None:
    config = cuda_config()
    bucket = CaptureBucket(GraphKind.DECODE, 64)
    [request] = warm_up_requests(bucket, config, max_model_len=4096, sid_path_length=5)
    assert request.constrained and request.catalog is None  # the default catalog
    assert request.beam_width == request.n == 64
    assert request.max_new_tokens == 5 and request.eos_token_id == ()
    assert not warm_up_requests(bucket, config, max_model_len=4096)[0].constrained


def test_warm_up_prompts_respect_the_context_length() -> None:
    config = cuda_config()
    bucket = CaptureBucket(GraphKind.PREFILL, 2048)
    requests = warm_up_requests(bucket, config, max_model_len=300)
    assert [len(r.input_ids) for r in requests] == [299] * 6 + [254]  # 2,048 together
    assert len({r.request_id for r in requests}) == 7
    # a context too short for the bucket's prompt capacity: as many prompts as it holds
    few = warm_up_requests(bucket, config, max_model_len=10)
    assert [len(r.input_ids) for r in few] == [9] * (prompt_capacity(2048) - 1)


@pytest.mark.parametrize("graph_tokens", [1000, 2048, 8192])
@pytest.mark.parametrize("context", [2, 3, 17, 40, 300, 1000, 5000, 40960])
def test_a_prefill_bucket_real_batches_can_meet_is_the_one_its_warm_up_fills(
    graph_tokens: int, context: int
) -> None:
    """With prompts of at most `context - 1` tokens, a batch of P prompts lands in every bucket
    from its fewest tokens' to its most tokens' (`bucket_tokens` grows with the total), if it
    fits a graph; each such bucket's warm-up must land in it, so serving captures nothing."""
    config = cuda_config(max_prefill_graph_tokens=graph_tokens)
    longest, top = context - 1, largest_bucket(graph_tokens)
    reachable = set()
    for prompts in range(1, prompt_capacity(top)):
        most = min(prompts * longest, graph_tokens)
        if most < prompts:
            break
        low, high = bucket_tokens(prompts, prompts), bucket_tokens(prompts, most)
        reachable |= {b for b in range(low, min(high, top) + 1, TOKEN_STEP)}
    for bucket in startup_captures(config):
        if bucket.kind != GraphKind.PREFILL or bucket.size not in reachable:
            continue
        lengths = [len(r.input_ids) for r in warm_up_requests(bucket, config, context)]
        assert max(lengths) <= longest
        assert fits_graph(lengths, graph_tokens), (bucket.size, lengths)
        assert bucket_tokens(len(lengths), sum(lengths)) == bucket.size, (bucket.size, lengths)


def test_declared_beam_widths_list_every_lockstep_batch_max_rows_holds() -> None:
    config = cuda_config(max_rows=1000, capture_beam_widths=(512, 50, 50, 100))
    assert config.capture_beam_widths == (50, 100, 512)
    batches = [
        (b.size, b.requests, b.eos)
        for b in startup_captures(config)
        if b.kind == GraphKind.EXPANSION
    ]
    # 50: every count to 16, then the bucket of 17..24 (20: all 1000 rows hold); 100: 10 at most
    sizes = [(50, r) for r in [*range(1, 17), 20]] + [(100, r) for r in range(1, 11)] + [(512, 1)]
    declared = [(w, r, eos) for w, r in sizes for eos in (False, True)]
    # then the first widenings (2 x 50 is declared already; 2 x 512 is past max_rows)
    assert batches == [*declared, (200, 1, False), (200, 2, False)]
    bucket = CaptureBucket(GraphKind.EXPANSION, 100, 10)
    requests = warm_up_requests(bucket, config, max_model_len=4096, sid_path_length=3)
    assert len(requests) == 10 and len({r.request_id for r in requests}) == 10
    assert {(r.beam_width, r.n, r.max_new_tokens, r.constrained) for r in requests} == {
        (100, 100, 3, True)
    }
    assert {r.eos_token_id for r in requests} == {()}  # Recommend's shape: the path, no EOS
    chat = warm_up_requests(bucket._replace(eos=True), config, 4096, sid_path_length=3)
    assert {(r.max_new_tokens, r.eos_token_id) for r in chat} == {(4, None)}  # the model's EOS
    assert not {r.request_id for r in chat} & {r.request_id for r in requests}
    assert not [b for b in startup_captures(cuda_config()) if b.kind == GraphKind.EXPANSION]


@pytest.mark.parametrize("widths", [(0,), (2000,), "50,x"])
def test_config_rejects_a_beam_width_it_could_not_run(widths: object) -> None:
    with pytest.raises(ValueError, match="capture_beam_widths"):
        cuda_config(max_rows=1000, capture_beam_widths=widths)


def test_beam_widths_come_as_text_from_flags_and_the_environment() -> None:
    assert cuda_config(capture_beam_widths="1000, 50").capture_beam_widths == (50, 1000)


def test_captures_count_as_startup_until_ready() -> None:
    counts = CaptureCounts()
    counts.record(GraphKind.DECODE)
    counts.record(GraphKind.EXPANSION)
    assert counts.total(CapturePhase.STARTUP) == 2
    counts.mark_ready()
    counts.record(GraphKind.PREFILL)
    assert counts.total(CapturePhase.SERVING) == 1
    assert counts.counts[GraphKind.PREFILL, CapturePhase.SERVING] == 1
    assert counts.counts[GraphKind.PREFILL, CapturePhase.STARTUP] == 0


def test_config_rejects_a_non_positive_capture_limit() -> None:
    with pytest.raises(ValueError, match="max_capture_rows must be positive"):
        cuda_config(max_capture_rows=0)


def test_a_widened_recommend_finds_its_graphs_captured() -> None:
    """The gateway's widening asks 2 x beam: one such call, or two in lockstep, must not capture
    while serving (the stack bench counts captures after ready)."""
    config = cuda_config(max_rows=16384, capture_beam_widths=(50, 512, 1000))
    widened = [
        (b.size, b.requests, b.eos)
        for b in startup_captures(config)
        if b.kind == GraphKind.EXPANSION and b.size not in config.capture_beam_widths
    ]
    assert widened == [(w, r, False) for w in (100, 1024, 2000) for r in (1, 2)]
    narrow = cuda_config(max_rows=1500, capture_beam_widths=(1000,))
    assert [b for b in startup_captures(narrow) if b.size == 2000] == []


def test_lockstep_counts_reach_every_bucket_up_to_32_requests() -> None:
    for width, max_rows in ((50, 16384), (512, 16384), (1000, 16384), (50, 1000), (7, 100)):
        counts = lockstep_counts(width, max_rows)
        most = max_rows // width
        assert all(1 <= c <= most for c in counts)
        buckets = [batch_bucket(c) for c in counts]
        assert buckets == sorted(set(buckets))  # one count per bucket
        assert set(buckets) == {batch_bucket(c) for c in range(1, min(most, 32) + 1)}
    assert lockstep_counts(50, 16384) == [*range(1, 17), 24, 32]
    assert lockstep_counts(1000, 16384) == list(range(1, 17))
