"""Module-level Celery app for `celery -A widebeam.services.gateway.batch.worker_main worker`.

Imported only by worker processes (settings from `WIDEBEAM_BATCH_*`); library code builds its
app with `create_celery(settings)` instead. `widebeam worker` is the usual way in."""

from __future__ import annotations

from widebeam.services.gateway.batch.celery_app import create_celery
from widebeam.services.gateway.batch.settings import BatchSettings

app = create_celery(BatchSettings(), with_tasks=True)
