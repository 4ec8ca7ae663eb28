"""`widebeam worker`: the Celery worker of the batch jobs (flags override `WIDEBEAM_BATCH_*`)."""

from __future__ import annotations

import argparse
import os

from widebeam.services.gateway.batch.settings import BatchSettings
from widebeam.settings_cli import settings_from_flags

# flag dest -> settings field (unset flags fall back to the environment, then the defaults)
_FIELDS = {
    "redis_url": "redis_url",
    "decoder": "decoder_addresses",
    "concurrency": "concurrency",
    "pool": "pool",
    "rows_in_flight": "rows_in_flight",
    "loglevel": "loglevel",
    "queue": "queue",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--redis-url", help="broker + job store [WIDEBEAM_BATCH_REDIS_URL]")
    add("--decoder", help="decoder gRPC addresses ADDR,... [..._DECODER_ADDRESSES]")
    add("--concurrency", type=int, help="chunks run at once (default 1)")
    add(
        "--pool",
        choices=["auto", "solo", "threads", "prefork"],
        help="Celery pool; auto (default): solo at concurrency 1, else threads",
    )
    add("--rows-in-flight", type=int, help="rows of a chunk sent to decoders at once (default 8)")
    add("--loglevel", help="DEBUG, INFO, WARNING, ... (default INFO)")
    add("--queue", help="Celery queue (default widebeam.batch)")
    parser.set_defaults(handler=run)


def settings_from_args(args: argparse.Namespace) -> BatchSettings:
    return settings_from_flags(BatchSettings, args, _FIELDS, "batch")


def worker_argv(settings: BatchSettings) -> list[str]:
    return [
        "worker",
        f"--loglevel={settings.loglevel}",
        f"--pool={settings.resolved_pool}",
        f"--concurrency={settings.concurrency}",
        f"--queues={settings.queue}",
        # Unique per process, so several workers on one host do not clash.
        f"--hostname=widebeam-batch-{os.getpid()}@%h",
        # Gossip and mingle only slow start-up; chunks need no worker-to-worker state.
        "--without-gossip",
        "--without-mingle",
    ]


def run(args: argparse.Namespace) -> int:
    from widebeam.services.gateway.batch.celery_app import create_celery

    settings = settings_from_args(args)
    app = create_celery(settings, with_tasks=True)
    app.worker_main(worker_argv(settings))
    return 0
