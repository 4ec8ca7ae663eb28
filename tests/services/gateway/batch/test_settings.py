"""Batch settings and the Celery configuration the delivery guarantees rest on."""

from __future__ import annotations

import argparse

import pytest

from widebeam.cli import build_parser
from widebeam.services.gateway.batch.celery_app import RUN_CHUNK, create_celery
from widebeam.services.gateway.batch.cli import settings_from_args, worker_argv
from widebeam.services.gateway.batch.settings import BatchSettings


def test_environment_and_comma_separated_decoders(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WIDEBEAM_BATCH_DECODER_ADDRESSES", "a:1, b:2")
    monkeypatch.setenv("WIDEBEAM_BATCH_CHUNK_SIZE", "7")
    settings = BatchSettings()
    assert settings.decoder_addresses == ["a:1", "b:2"] and settings.chunk_size == 7


def test_the_visibility_timeout_must_exceed_the_longest_chunk() -> None:
    with pytest.raises(ValueError, match="must exceed the longest chunk"):
        BatchSettings(chunk_size=100, row_budget_s=60, visibility_timeout_s=3600)


def test_celery_is_json_only_acks_late_and_prefetches_one() -> None:
    settings = BatchSettings(redis_url="redis://127.0.0.1:1/0", visibility_timeout_s=4000)
    app = create_celery(settings)
    conf = app.conf
    assert conf.task_serializer == conf.result_serializer == "json"
    assert conf.accept_content == conf.result_accept_content == ["json"]
    assert conf.task_acks_late and conf.task_reject_on_worker_lost
    assert conf.worker_prefetch_multiplier == 1
    assert conf.broker_transport_options["visibility_timeout"] == 4000
    assert conf.result_expires == settings.result_ttl_s
    assert RUN_CHUNK not in app.tasks  # the gateway only sends by name
    assert RUN_CHUNK in create_celery(settings, with_tasks=True).tasks


def test_worker_flags_override_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WIDEBEAM_BATCH_REDIS_URL", "redis://env:6379/0")
    monkeypatch.setenv("WIDEBEAM_BATCH_CONCURRENCY", "3")
    args = build_parser().parse_args(["worker", "--decoder", "x:1,y:2", "--loglevel", "DEBUG"])
    settings = settings_from_args(args)
    assert settings.redis_url == "redis://env:6379/0" and settings.decoder_addresses == [
        "x:1",
        "y:2",
    ]
    argv = worker_argv(settings)
    assert "--pool=threads" in argv and "--concurrency=3" in argv and "--loglevel=DEBUG" in argv
    assert "--pool=solo" in worker_argv(BatchSettings(concurrency=1))
    with pytest.raises(ValueError, match="concurrency"):
        settings_from_args(argparse.Namespace(concurrency=0))
