"""The chunk task's logic in-process, against a real decoder: results in the recommend shape
(the very answers of `/v1/recommend`), idempotent re-runs, row errors, widening, cancellation
between rows, rows waiting for decoders until the job's deadline, chunk leases."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.services.decoder.conftest import SidModel
from tests.services.decoder.server.conftest import make_settings
from tests.services.gateway.batch.conftest import batch_settings, store_of
from tests.services.gateway.support import GatewayServer, gateway_settings
from widebeam.services.decoder.server.background import BackgroundServer
from widebeam.services.gateway.batch.chunk_leases import ChunkLeases
from widebeam.services.gateway.batch.decoder_runner import DecoderRunner
from widebeam.services.gateway.batch.job_ids import log_id
from widebeam.services.gateway.batch.job_store import JobStore
from widebeam.services.gateway.batch.schemas import DEFAULTED_BEAM, RowLimits, validate_row
from widebeam.services.gateway.batch.settings import BatchSettings
from widebeam.services.gateway.batch.tasks import ChunkPolicy, process_chunk
from widebeam.services.gateway.recommender import RecommendLimits
from widebeam.services.http.errors import ApiError

LIMITS = RowLimits(RecommendLimits(32, 64, 50, 16, max_exclude=100))


def rows(count: int, **fields: Any) -> list[dict[str, Any]]:
    history = [["item-3", "item-17"], ["item-42"], ["item-7", "item-8", "item-9"]]
    return [
        validate_row({"history": history[i % 3], "n": 5} | fields, LIMITS, None)
        for i in range(count)
    ]


@pytest.fixture
def settings(redis_url: str, decoder: BackgroundServer) -> BatchSettings:
    return batch_settings(redis_url, decoder.address, row_budget_s=5, visibility_timeout_s=60)


@pytest.fixture
def runner(settings: BatchSettings) -> DecoderRunner:
    return DecoderRunner(settings)


def run(store: JobStore, runner: DecoderRunner, job_id: str, chunk: int) -> dict:
    policy = ChunkPolicy.from_settings(runner.settings.model_copy(update={"rows_in_flight": 3}))
    leases = ChunkLeases(store.client, store.namespace)
    return process_chunk(store, leases, runner, job_id, chunk, policy)


def results(store: JobStore, job_id: str, total: int) -> list[dict[str, Any]]:
    return [json.loads(line) for line in store.iter_results(job_id, total)]


def test_a_chunk_writes_recommend_responses_and_reruns_write_nothing(
    settings: BatchSettings, runner: DecoderRunner, sid_model: SidModel
) -> None:
    store = store_of(settings)
    job = store.create(rows(12, user_id="u1"), chunk_size=10, catalog=None)
    assert run(store, runner, job.id, 1) == {
        "job": log_id(job.id),  # what Celery logs: the short id only
        "chunk": 1,
        "sent": 2,
        "refused": 0,
        "written": 2,
        "outcome": "running",
    }
    assert run(store, runner, job.id, 0)["outcome"] == "succeeded"
    again = run(store, runner, job.id, 0)  # redelivered: every row is present
    assert (again["sent"], again["written"]) == (0, 0)
    got = results(store, job.id, 12)
    assert [r["row"] for r in got] == list(range(12))
    catalog = dict(sid_model.catalog)
    first = got[0]
    assert first["user_id"] == "u1" and first["model"] and first["latency_ms"] > 0
    assert first["catalog"]["name"] == "default" and first["catalog"]["version"].startswith("file-")
    assert len(first["items"]) == 5 and first["usage"]["total_tokens"] > 0
    for item in first["items"]:
        assert tuple(item["sid"]) == catalog[item["item_id"]]
        assert item["item_id"] not in ("item-3", "item-17")  # exclude_history
    record = store.get(job.id)
    assert record is not None and (record.status, record.done, record.failed) == (
        "succeeded",
        12,
        0,
    )


def test_row_errors_are_rows_and_exhaustion_widens_the_beam(
    settings: BatchSettings, runner: DecoderRunner
) -> None:
    store = store_of(settings)
    bad = rows(1)[0] | {"history": ["no-such-item"]}
    narrow = rows(1, beam_width=5)[0]
    taken = [i["item_id"] for i in runner.recommend(narrow).result(10)["items"]]
    excluding = narrow | {"exclude": taken}
    elsewhere = rows(1)[0] | {"catalog": "nowhere"}
    job = store.create([bad, excluding, elsewhere], chunk_size=3, catalog=None)
    # Every row has a result, two of them errors: the job says so.
    assert run(store, runner, job.id, 0)["outcome"] == "completed_with_errors"
    error, widened, unknown = results(store, job.id, 3)
    assert unknown["error"]["code"] == "catalog_not_found" and unknown["error"]["status"] == 404
    assert error["error"]["status"] == 400 and "no-such-item" in error["error"]["message"]
    assert error["error"]["type"] == "invalid_request_error"
    assert widened["beam_width"] > 5 and len(widened["items"]) == 5
    assert not {i["item_id"] for i in widened["items"]} & set(taken)
    record = store.get(job.id)
    assert record is not None
    assert (record.status, record.done, record.failed) == ("completed_with_errors", 3, 2)


def test_cancellation_is_seen_between_rows(
    settings: BatchSettings, runner: DecoderRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = store_of(settings)
    job = store.create(rows(10), chunk_size=10, catalog=None)
    sent: list[int] = []
    real = runner.recommend

    def recommend_then_cancel(row: dict[str, Any]) -> Any:
        sent.append(1)
        if len(sent) == 4:
            store.cancel(job.id)
        return real(row)

    monkeypatch.setattr(runner, "recommend", recommend_then_cancel)
    assert run(store, runner, job.id, 0)["outcome"] == "cancelled"
    record = store.get(job.id)
    assert record is not None and record.status == "cancelled" and record.done == 4


@pytest.fixture
def dead_runner(settings: BatchSettings) -> Iterator[DecoderRunner]:
    yield DecoderRunner(settings.model_copy(update={"decoder_addresses": ["127.0.0.1:1"]}))


def test_rows_wait_for_decoders_until_the_job_deadline_then_fail(
    settings: BatchSettings, dead_runner: DecoderRunner
) -> None:
    store = store_of(settings)
    job = store.create(rows(2), chunk_size=2, catalog=None, deadline_s=1.0)
    summary = run(store, dead_runner, job.id, 0)
    # Each row was tried again while the deadline lasted (0.2 s back-off, doubling), then its
    # refusal became its result.
    assert summary["outcome"] == "failed" and summary["refused"] > 0, summary
    assert summary["sent"] - summary["refused"] == 2
    assert {r["error"]["code"] for r in results(store, job.id, 2)} == {"decoder_unavailable"}
    assert time.time() >= store.get(job.id).deadline_at  # type: ignore[union-attr]


def test_a_job_cancelled_while_its_rows_wait_for_decoders_stops(
    settings: BatchSettings, dead_runner: DecoderRunner
) -> None:
    store = store_of(settings)
    job = store.create(rows(4), chunk_size=4, catalog=None)  # a day to wait
    cancel = threading.Timer(1.0, store.cancel, args=[job.id])
    cancel.start()
    try:
        summary = run(store, dead_runner, job.id, 0)
    finally:
        cancel.cancel()
    assert summary["outcome"] == "cancelled" and summary["written"] == 0, summary
    leases = ChunkLeases(store.client, store.namespace)
    assert leases.reclaim(settings.queue, grace_s=0) == []  # nothing left to send again


def test_a_chunk_leased_by_a_live_run_is_left_to_it(
    settings: BatchSettings, runner: DecoderRunner
) -> None:
    store = store_of(settings)
    job = store.create(rows(3), chunk_size=3, catalog=None)
    leases = ChunkLeases(store.client, store.namespace)
    assert leases.take(job.id, 0, lease_s=60)  # another worker runs it
    assert run(store, runner, job.id, 0) | {"job": "-"} == {
        "job": "-", "chunk": 0, "sent": 0, "refused": 0, "written": 0,
        "outcome": "leased elsewhere",
    }  # fmt: skip
    leases.renew(job.id, 0, lease_s=-1)  # its worker died: the lease ran out
    assert run(store, runner, job.id, 0)["outcome"] == "succeeded"


def test_rows_carry_normalization_to_the_decoder(runner: DecoderRunner) -> None:
    def scores(row: dict[str, Any]) -> dict[str, float]:
        return {i["item_id"]: i["score"] for i in runner.recommend(row).result(10)["items"]}

    vocab_row, sid_row = rows(1, beam_width=16)[0], rows(1, beam_width=16, normalization="sid")[0]
    assert vocab_row["normalization"] == "vocab" and sid_row["normalization"] == "sid"
    vocab, sid = scores(vocab_row), scores(sid_row)
    shared = set(vocab) & set(sid)
    assert shared and all(sid[i] >= vocab[i] - 1e-4 for i in shared)
    assert any(sid[i] > vocab[i] + 1e-4 for i in shared)
    # Rows queued before the field existed have no key: they decode as "vocab".
    legacy = {k: v for k, v in vocab_row.items() if k != "normalization"}
    assert scores(legacy) == pytest.approx(vocab, abs=1e-4)
    with pytest.raises(ValueError, match="normalization: Input should be 'vocab' or 'sid'"):
        rows(1, normalization="softmax")


def test_a_row_gets_the_answer_the_route_gives(
    decoder: BackgroundServer, runner: DecoderRunner
) -> None:
    """One implementation: a row and the same `/v1/recommend` body decode alike, widening
    included (the row's usage, beam and items are the route's)."""
    narrow = rows(1, beam_width=4, n=4)[0]
    taken = [i["item_id"] for i in runner.recommend(narrow).result(10)["items"]]
    cases = [rows(1)[0], rows(1, normalization="sid")[0], narrow | {"exclude": taken}]
    with (
        GatewayServer(gateway_settings([decoder.address], max_beam_width=512)) as gateway,
        httpx.Client(base_url=gateway.url, timeout=30) as http,
    ):
        for row in cases:
            body = {k: v for k, v in row.items() if k not in ("user_id", DEFAULTED_BEAM)}
            answer = http.post("/v1/recommend", json=body)
            assert answer.status_code == 200, answer.text
            route, worker = answer.json(), runner.recommend(row).result(10)
            assert route.pop("latency_ms") > 0 and worker.pop("latency_ms") > 0
            assert worker == route, row
    assert route["beam_width"] > 4  # the last case widened, in both


def test_a_row_without_beam_width_is_narrowed_to_the_decoders_widest_beam(
    redis_url: str, sid_model: SidModel
) -> None:
    """The gateway's default beam (16 here) on a decoder that takes 8 at most: the row decodes
    with 8, as /v1/recommend would; a row that asked for 16 itself gets the decoder's 400."""
    with BackgroundServer(make_settings(sid_model, max_rows=8)) as narrow:
        settings = batch_settings(
            redis_url, narrow.address, row_budget_s=5, visibility_timeout_s=60
        )
        runner = DecoderRunner(settings)
        defaulted, asked = rows(1)[0], rows(1, beam_width=16)[0]
        assert defaulted["beam_width"] == 16 and defaulted[DEFAULTED_BEAM] is True
        answer = runner.recommend(defaulted).result(30)
        assert answer["beam_width"] == 8 and len(answer["items"]) == 5
        with (
            GatewayServer(gateway_settings([narrow.address], default_beam_width=16)) as gateway,
            httpx.Client(base_url=gateway.url, timeout=30) as http,
        ):
            body = {k: v for k, v in defaulted.items() if k not in ("beam_width", DEFAULTED_BEAM)}
            route = http.post("/v1/recommend", json=body).json()
        assert [i["item_id"] for i in route["items"]] == [i["item_id"] for i in answer["items"]]
        with pytest.raises(ApiError, match="beam_width 16 exceeds") as refused:
            runner.recommend(asked).result(30)
        assert refused.value.status == 400
        too_many = rows(1, n=9)[0]  # n 9 > the narrowed beam 8: the route's own 400
        with pytest.raises(ApiError, match=r"n \(9\) must be <= beam_width \(8\)"):
            runner.recommend(too_many).result(30)
