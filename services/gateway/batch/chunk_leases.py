"""Chunk leases: which chunks are waiting for a worker and which are being run, kept in Redis
beside the jobs (not in the broker), so that a chunk is sent again when its worker dies or its
broker message is lost.

Keys (`P` = settings.namespace), members `"{job id}:{chunk index}"`:
  P:chunks:queued  ZSET  -> when the chunk was (re)queued, unix seconds
  P:chunks:leased  ZSET  -> when its lease runs out, unix seconds

A job's chunks are entered as queued when the job is created (or its failed rows retried), in
the same transaction (`queue_in`). A worker takes the chunk's lease when it starts it (`take`:
refused while another run holds a live lease, so a redelivered message leaves at once), renews
it every lease_s/3 while it runs (`kept`), and removes both entries when the chunk is done
(`release`). Each worker's watchdog (`reclaim`) moves every lease that ran out back to queued
and sends its chunk again (its worker was killed, or hung); and while the broker queue is
empty, a chunk still queued `grace_s` after it was queued has lost its message (Redis refused
to record a delivery, a send failed), so it is sent again too. A chunk sent twice costs little:
rows are written once (HSETNX) and a run skips rows already written."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import redis
from redis.client import Pipeline

from widebeam.services.gateway.batch.job_ids import log_id

log = logging.getLogger(__name__)

# Most chunks one watchdog sweep sends again; the rest wait for the next sweep.
RECLAIM_LIMIT = 500

# KEYS: queued, leased; ARGV: member, now, lease_s. 1: taken; 0: another run holds a live lease.
_TAKE = """
local held = redis.call('ZSCORE', KEYS[2], ARGV[1])
if held and tonumber(held) > tonumber(ARGV[2]) then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[2], tonumber(ARGV[2]) + tonumber(ARGV[3]), ARGV[1])
return 1
"""

# KEYS: queued, leased, the broker's queue list; ARGV: now, grace_s, limit.
_RECLAIM = """
local now = tonumber(ARGV[1])
local out = {}
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, ARGV[3])
for _, member in ipairs(expired) do
  redis.call('ZREM', KEYS[2], member)
  redis.call('ZADD', KEYS[1], now, member)
  table.insert(out, member)
end
if redis.call('LLEN', KEYS[3]) == 0 then
  local lost = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[2]),
                          'LIMIT', 0, ARGV[3])
  for _, member in ipairs(lost) do
    redis.call('ZADD', KEYS[1], now, member)
    table.insert(out, member)
  end
end
return out
"""


def queued_key(namespace: str) -> str:
    return f"{namespace}:chunks:queued"


def leased_key(namespace: str) -> str:
    return f"{namespace}:chunks:leased"


def member(job_id: str, chunk: int) -> str:
    return f"{job_id}:{chunk}"


def queue_in(pipe: Pipeline, namespace: str, job_id: str, chunks: Iterable[int]) -> None:
    """Adds 'queued' entries for `chunks` to a transaction the caller runs."""
    now = time.time()
    entries = {member(job_id, chunk): now for chunk in chunks}
    if entries:
        pipe.zadd(queued_key(namespace), entries)


class ChunkLeases:
    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self.client = client
        self.queued = queued_key(namespace)
        self.leased = leased_key(namespace)
        self._take = client.register_script(_TAKE)
        self._reclaim = client.register_script(_RECLAIM)

    def take(self, job_id: str, chunk: int, lease_s: float) -> bool:
        """False when another run holds the chunk's lease and it has not run out."""
        args = [member(job_id, chunk), repr(time.time()), repr(lease_s)]
        return bool(self._take(keys=[self.queued, self.leased], args=args))

    def renew(self, job_id: str, chunk: int, lease_s: float) -> None:
        """Pushes the lease's end out; a lease already reclaimed is left alone (XX)."""
        self.client.zadd(self.leased, {member(job_id, chunk): time.time() + lease_s}, xx=True)

    def release(self, job_id: str, chunk: int) -> None:
        """The chunk is done (or its job ended): nothing to send again."""
        with self.client.pipeline(transaction=False) as pipe:
            pipe.zrem(self.leased, member(job_id, chunk)).zrem(self.queued, member(job_id, chunk))
            pipe.execute()

    def hand_back(self, job_id: str, chunk: int) -> None:
        """The run stops before the chunk is done: queued again, free for the next run."""
        with self.client.pipeline(transaction=True) as pipe:
            pipe.zrem(self.leased, member(job_id, chunk))
            pipe.zadd(self.queued, {member(job_id, chunk): time.time()})
            pipe.execute()

    def reclaim(self, broker_queue: str, grace_s: float) -> list[tuple[str, int]]:
        """Chunks to send again: leases that ran out, and, while `broker_queue` is empty,
        chunks queued more than `grace_s` ago. Each comes back once per sweep of any worker
        (it is marked queued now)."""
        keys = [self.queued, self.leased, broker_queue]
        found = self._reclaim(keys=keys, args=[repr(time.time()), repr(grace_s), RECLAIM_LIMIT])
        out = []
        for raw in found:
            job_id, _, chunk = raw.decode().rpartition(":")
            out.append((job_id, int(chunk)))
        return out

    @contextmanager
    def kept(self, job_id: str, chunk: int, lease_s: float) -> Iterator[None]:
        """Renews the chunk's lease every lease_s/3 on a thread while the block runs. A renewal
        that fails (Redis away) is tried again at the next tick; should the lease run out
        meanwhile, the chunk is sent again and two runs share it, harmlessly."""
        stop = threading.Event()

        def renew() -> None:
            while not stop.wait(lease_s / 3):
                try:
                    self.renew(job_id, chunk, lease_s)
                except redis.RedisError as exc:
                    log.warning(
                        "job %s chunk %d: lease not renewed (%s)",
                        log_id(job_id), chunk, type(exc).__name__,
                    )  # fmt: skip

        thread = threading.Thread(target=renew, name="batch-chunk-lease", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
