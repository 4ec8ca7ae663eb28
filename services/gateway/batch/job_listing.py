"""Each API key's batch jobs, newest first: the listing behind `GET /v1/batch-jobs`.

Keys (`P` = settings.namespace):
  P:jobs               ZSET  every job id, scored by its creation time (the list without keys)
  P:jobs:owner:{hash}  ZSET  the ids of the jobs one API key created (`ownership.owner_hash`)
An entry is written in its job's creation transaction (`index_in`) and has no TTL of its own:
an id whose job has expired is dropped when a listing meets it, and each new job drops the
expired ones among the oldest `PRUNED_PER_JOB` of its lists, so a list holds about one entry
(an id, ~50 bytes) per live job.

Pages follow a cursor, `after` = the id of the previous page's last job, instead of an offset:
jobs created while a client pages through do not shift the pages (an offset would repeat
jobs). Ties in creation time are ordered by id, the same way on every page."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import redis

if TYPE_CHECKING:
    from widebeam.services.gateway.batch.job_store import JobRecord, JobStore

PRUNED_PER_JOB = 2
DEFAULT_LIMIT, MAX_LIMIT = 20, 100  # jobs per page


def index_key(namespace: str, owner: str | None) -> str:
    """The list of `owner`'s jobs; None (no API keys configured): of every job."""
    return f"{namespace}:jobs" if owner is None else f"{namespace}:jobs:owner:{owner}"


def index_in(pipe: Any, namespace: str, job_id: str, owner: str, created_at: float) -> None:
    """Adds a new job to the lists it belongs to, inside its creation transaction `pipe`."""
    pipe.zadd(index_key(namespace, None), {job_id: created_at})
    if owner:
        pipe.zadd(index_key(namespace, owner), {job_id: created_at})


def drop_expired_oldest(client: redis.Redis, namespace: str, owner: str) -> None:
    """Removes the expired jobs among the oldest few of the lists a new job entered. Upkeep
    only: a Redis error here leaves them to a later job or listing, and the new job stands."""
    try:
        for key in {index_key(namespace, None), index_key(namespace, owner or None)}:
            oldest = [raw.decode() for raw in client.zrange(key, 0, PRUNED_PER_JOB - 1)]
            gone = [i for i in oldest if not client.exists(f"{namespace}:job:{i}")]
            if gone:
                client.zrem(key, *gone)
    except redis.RedisError:
        pass


class UnknownCursor(LookupError):
    """`after` names no job of the caller's list (unknown, expired, or another key's)."""


@dataclass(frozen=True)
class JobPage:
    jobs: list[JobRecord]  # newest first
    has_more: bool  # older jobs follow the last one


def list_jobs(store: JobStore, owner: str | None, limit: int, after: str | None) -> JobPage:
    """Up to `limit` of `owner`'s live jobs, newest first, after the job `after` (None: from
    the newest). Raises UnknownCursor when `after` is not in `owner`'s list."""
    key = index_key(store.namespace, owner)
    start = 0
    if after is not None:
        rank = store.client.zrevrank(key, after)
        if rank is None:
            raise UnknownCursor(after)
        start = int(rank) + 1
    jobs: list[JobRecord] = []
    seen: set[str] = set()  # a job created meanwhile shifts the ranks by one
    while len(jobs) <= limit:  # one more than asked: is there a next page?
        ids = [raw.decode() for raw in store.client.zrevrange(key, start, start + limit)]
        if not ids:
            break
        start += len(ids)
        expired = []
        for job_id in ids:
            job = store.get(job_id)
            if job is None:
                expired.append(job_id)
            elif job_id not in seen:
                seen.add(job_id)
                jobs.append(job)
        if expired:
            store.client.zrem(key, *expired)
            start -= len(expired)  # the entries behind them moved up
    return JobPage(jobs[:limit], has_more=len(jobs) > limit)
