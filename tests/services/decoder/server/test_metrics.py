"""The decoder's /metrics: the graph-capture counter is exported for every kind and phase, and
on CPU (no CUDA graphs) it stays 0 before and after ready, requests served or not; the
prefix-cache counters count a repeated prompt's cached tokens; the forward counters count what
the engine ran."""

from __future__ import annotations

import re
import urllib.request

import grpc

from tests.services.decoder.conftest import SidModel
from tests.services.decoder.server.conftest import make_settings
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2 as pb
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2_grpc as pb_grpc
from widebeam.services.decoder.runner.capture_counts import CapturePhase, GraphKind
from widebeam.services.decoder.server.background import BackgroundServer

SAMPLE = re.compile(
    r'^widebeam_decoder_graph_captures_total\{kind="(\w+)",phase="(\w+)"\} ([0-9.e+]+)$', re.M
)


def scrape(metrics_port: int) -> str:
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read().decode()


def captures(metrics_port: int) -> dict[tuple[str, str], float]:
    return {
        (kind, phase): float(value) for kind, phase, value in SAMPLE.findall(scrape(metrics_port))
    }


def test_graph_captures_are_exported_and_stay_zero_on_cpu(sid_model: SidModel) -> None:
    settings = make_settings(sid_model, metrics_port=0)
    with BackgroundServer(settings) as srv:
        port = srv.server.metrics_port
        assert port
        expected = {(k.value, p.value) for k in GraphKind for p in CapturePhase}
        assert set(captures(port)) == expected
        with grpc.insecure_channel(srv.address) as channel:
            stub = pb_grpc.DecoderStub(channel)
            for width in (1, 8, 64):  # a shape of every kind the CPU path has
                request = pb.GenerateRequest(input_ids=[5, 6, 7], beam_width=width, n=1,
                                             max_new_tokens=3)  # fmt: skip
                assert stub.Generate(request, timeout=60).beams
        after = captures(port)
        assert set(after) == expected
        assert all(count == 0 for count in after.values()), after
        assert srv.server.engine is not None
        assert srv.server.engine.engine.runner.capture_counts.ready


def _sample(text: str, name: str) -> float:
    [value] = re.findall(rf"^{re.escape(name)} ([0-9.e+-]+)$", text, re.M)
    return float(value)


def test_prefix_cache_hits_are_counted(sid_model: SidModel) -> None:
    prompt = list(range(1, 40))  # 2 full pages of 16, then 7 tokens
    with BackgroundServer(make_settings(sid_model, metrics_port=0)) as srv:
        port = srv.server.metrics_port
        assert port
        before = scrape(port)
        assert _sample(before, "widebeam_decoder_prefix_cache_hit_tokens_total") == 0
        with grpc.insecure_channel(srv.address) as channel:
            stub = pb_grpc.DecoderStub(channel)
            for _ in range(2):
                request = pb.GenerateRequest(input_ids=prompt, beam_width=4, n=2, max_new_tokens=2)
                assert stub.Generate(request, timeout=60).beams
        text = scrape(port)
    assert _sample(text, "widebeam_decoder_prefix_cache_prompt_tokens_total") == 2 * len(prompt)
    assert _sample(text, "widebeam_decoder_prefix_cache_hit_tokens_total") == 32
    assert _sample(text, "widebeam_decoder_prefix_cache_hit_ratio") == 32 / 78
    assert _sample(text, 'widebeam_decoder_prefix_cache_pages{state="unheld"}') == 2


def test_no_metrics_endpoint_unless_asked(sid_model: SidModel) -> None:
    with BackgroundServer(make_settings(sid_model)) as srv:
        assert srv.server.metrics_port is None
        assert srv.server.metrics is None


def test_forwards_and_their_batches_are_counted(sid_model: SidModel) -> None:
    with BackgroundServer(make_settings(sid_model, metrics_port=0)) as srv:
        port = srv.server.metrics_port
        assert port
        before = scrape(port)
        names = (
            'widebeam_decoder_forwards_total{kind="prefill"}',
            'widebeam_decoder_forwards_total{kind="decode"}',
            "widebeam_decoder_prefilled_requests_total",
            "widebeam_decoder_beam_expansions_total",
            'widebeam_decoder_forward_rows_total{kind="prefill"}',
            'widebeam_decoder_forward_rows_total{kind="decode"}',
            "widebeam_decoder_step_seconds_total",
            "widebeam_decoder_eager_prefills_total",
            "widebeam_decoder_split_prefills_total",
            "widebeam_decoder_inbox_requests_total",
            "widebeam_decoder_inbox_seconds_total",
        )
        with grpc.insecure_channel(srv.address) as channel:
            stub = pb_grpc.DecoderStub(channel)
            for i in range(3):  # one after another: a prefill forward each
                request = pb.GenerateRequest(input_ids=[5, 6, 7 + i], beam_width=4, n=2,
                                             max_new_tokens=3, ignore_eos=True)  # fmt: skip
                assert stub.Generate(request, timeout=60).beams
        after = scrape(port)
    delta = [_sample(after, name) - _sample(before, name) for name in names]
    assert delta[0] == 3 and delta[2] == 3
    assert delta[1] == 3 * 2  # the prefill picks the first of 3 tokens
    assert delta[3] == 0  # a beam of 4 over the tiny vocabulary ranks densely: not streamed
    assert delta[4] == 3 * 3  # three prompts of 3 tokens, nothing cached
    assert delta[5] == 3 * 2 * 4  # each decode forward runs one request's 4 rows
    assert delta[6] > 0
    assert delta[7:9] == [3, 0]  # the CPU has no prefill graphs: each prefill ran op by op
    assert delta[9] == 3  # each call's request, taken from the inbox by the engine thread
    assert 0 <= delta[10] < 60  # the time they waited for it, read


def test_group_waits_are_counted(sid_model: SidModel) -> None:
    """A decoder with group_wait_ms: a lone request after a lone answer waits for nothing (the
    counters are exposed, at 0); the waits themselves: test_async_engine_group_wait.py."""
    settings = make_settings(sid_model, metrics_port=0, group_wait_ms=50.0)
    with BackgroundServer(settings) as srv:
        port = srv.server.metrics_port
        assert port
        with grpc.insecure_channel(srv.address) as channel:
            stub = pb_grpc.DecoderStub(channel)
            for i in range(2):
                request = pb.GenerateRequest(input_ids=[5, 6, 7 + i], beam_width=4, n=2,
                                             max_new_tokens=3, ignore_eos=True)  # fmt: skip
                assert stub.Generate(request, timeout=60).beams
        text = scrape(port)
    assert srv.server.engine.group_wait_s == 0.05
    assert _sample(text, "widebeam_decoder_group_waits_total") == 0
    assert _sample(text, "widebeam_decoder_group_wait_seconds_total") == 0


def test_the_deadline_rule_calibration_is_exported(sid_model: SidModel) -> None:
    """The factor the deadline rule multiplies predictions by: 1 on a fresh decoder, and the
    same object the engine feeds (what a scrape shows is what admission uses)."""
    settings = make_settings(sid_model, metrics_port=0)
    with BackgroundServer(settings) as srv:
        port = srv.server.metrics_port
        assert port and srv.server.engine is not None
        assert _sample(scrape(port), "widebeam_decoder_finish_calibration") == 1.0
        calibration = srv.server.engine.calibration
        for _ in range(calibration.min_samples):
            calibration.record(predicted_s=0.2, actual_s=0.5)
        assert _sample(scrape(port), "widebeam_decoder_finish_calibration") == 2.5
