"""Batch job ids: 128 random bits from `secrets`, written as 32 lowercase hex digits.

An id is the only handle on a job, so it must not be guessable: another client cannot reach a
job by trying ids (and with API keys configured a job answers only its own key anyway). Logs
name a job by `log_id`, its first 8 digits: enough to follow one job through a log, too few to
reach it."""

from __future__ import annotations

import re
import secrets

JOB_ID_BYTES = 16  # 128 bits
JOB_ID = re.compile(r"^[0-9a-f]{32}$")
LOGGED_DIGITS = 8


def new_job_id() -> str:
    return secrets.token_hex(JOB_ID_BYTES)


def log_id(job_id: str) -> str:
    """The short form a log may show."""
    return job_id[:LOGGED_DIGITS]


def redact(text: str, job_id: str) -> str:
    """`text` (an error message, say) with the job's full id cut to its log form."""
    return text.replace(job_id, log_id(job_id)) if job_id else text
