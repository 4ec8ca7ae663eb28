"""The Celery app of the batch jobs, built from settings (no import-time singleton), and the
one way a chunk is sent (`send_chunk`)."""

from __future__ import annotations

from celery import Celery

from widebeam.services.gateway.batch import broker
from widebeam.services.gateway.batch.job_ids import log_id
from widebeam.services.gateway.batch.settings import BatchSettings

RUN_CHUNK = "widebeam.batch.run_chunk"


def send_chunk(app: Celery, settings: BatchSettings, job_id: str, chunk: int) -> None:
    """Queues one chunk task. Its arguments as shown by Celery (logs, `celery inspect`) carry
    the job's short id only."""
    args = [job_id, chunk]
    app.send_task(
        RUN_CHUNK, args=args, queue=settings.queue, argsrepr=repr([log_id(job_id), chunk])
    )


def create_celery(settings: BatchSettings, *, with_tasks: bool = False) -> Celery:
    """Broker and result backend on `settings.redis_url`; JSON only.

    The gateway only sends tasks by name, so it builds the app without tasks; workers pass
    `with_tasks=True` to register `run_chunk` (which imports the gRPC client)."""
    app = Celery(
        "widebeam-batch",
        broker=settings.redis_url,
        backend=settings.redis_url,
        set_as_current=False,
    )
    transport = {
        # Acks, deliveries and requeues ride out a refusing Redis this long (see broker.py).
        broker.RETRY_OPTION: settings.redis_retry_s,
        "visibility_timeout": settings.visibility_timeout_s,
        # Sweep for chunks of lost workers every restore_interval_s (kombu otherwise scans on
        # only every 10th sweep).
        "unacked_restore_interval": settings.restore_interval_s,
        "unacked_restore_throttle": 1,
        # A worker that dies (or loses Redis) inside a sweep leaves the sweep's lock behind;
        # kombu's default 300 s would hold every redelivery back that long.
        "unacked_mutex_expire": min(300, settings.visibility_timeout_s),
    }
    app.conf.update(
        # Never pickle: task arguments and results cross processes.
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        result_accept_content=["json"],
        # A chunk is acknowledged only after it ran; a worker that dies mid-chunk leaves it
        # unacked, and Redis hands it to another worker after the visibility timeout.
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        # kombu's Redis transport, riding out Redis refusals (out of memory...) that would
        # otherwise end the worker.
        broker_transport=broker.TRANSPORT,
        broker_transport_options=transport,
        result_backend_transport_options={"visibility_timeout": settings.visibility_timeout_s},
        result_expires=settings.result_ttl_s,
        task_default_queue=settings.queue,
        task_routes={RUN_CHUNK: {"queue": settings.queue}},
        broker_connection_retry_on_startup=True,
        worker_cancel_long_running_tasks_on_connection_loss=True,
        enable_utc=True,
    )
    if with_tasks:
        from widebeam.services.gateway.batch.tasks import register_tasks

        register_tasks(app, settings)  # the chunk task and the workers' chunk watchdog
    return app
