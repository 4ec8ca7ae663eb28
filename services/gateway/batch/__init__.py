"""Batch jobs: `/v1/batch-jobs` routes (`router.py`), a Redis job store, Celery chunk tasks and
the `widebeam worker` entry point. See README.md in this folder."""
