"""Chunk leases against a real Redis: a live lease keeps a chunk to its run, one that ran out
is sent again, and a queued chunk counts as lost only while the broker queue is empty."""

from __future__ import annotations

import time

import redis

from tests.services.gateway.batch.conftest import wait_for
from widebeam.services.gateway.batch.chunk_leases import ChunkLeases, queue_in

NS = "test:batch"
QUEUE = "test.batch"


def leases_with(client: redis.Redis, *chunks: int) -> ChunkLeases:
    with client.pipeline(transaction=True) as pipe:
        queue_in(pipe, NS, "job-a", chunks)
        pipe.execute()
    return ChunkLeases(client, NS)


def test_a_live_lease_is_kept_and_one_that_ran_out_is_reclaimed(
    redis_client: redis.Redis,
) -> None:
    leases = leases_with(redis_client, 0, 1)
    assert leases.take("job-a", 0, lease_s=60)
    assert not leases.take("job-a", 0, lease_s=60)  # a redelivered copy leaves it alone
    redis_client.lpush(QUEUE, b"another job's message")  # the queue is busy
    assert leases.reclaim(QUEUE, grace_s=0) == []  # chunk 1 may simply be waiting its turn
    leases.renew("job-a", 0, lease_s=-1)  # the worker died: no renewal came
    assert leases.reclaim(QUEUE, grace_s=0) == [("job-a", 0)]
    assert leases.reclaim(QUEUE, grace_s=60) == []  # sent once, not at every sweep
    assert leases.take("job-a", 0, lease_s=60)  # the new run takes it over
    leases.release("job-a", 0)
    leases.renew("job-a", 0, lease_s=-1)  # a late renewal of a released lease adds nothing
    assert leases.reclaim(QUEUE, grace_s=60) == []


def test_a_queued_chunk_is_lost_only_when_the_queue_is_empty(redis_client: redis.Redis) -> None:
    leases = leases_with(redis_client, 0)
    time.sleep(0.05)
    redis_client.lpush(QUEUE, b"a message")
    assert leases.reclaim(QUEUE, grace_s=0.01) == []
    redis_client.delete(QUEUE)
    assert leases.reclaim(QUEUE, grace_s=30) == []  # queued too recently
    assert leases.reclaim(QUEUE, grace_s=0.01) == [("job-a", 0)]
    leases.hand_back("job-a", 0)  # a run that stops early queues it again
    time.sleep(0.05)
    assert leases.reclaim(QUEUE, grace_s=0.01) == [("job-a", 0)]


def test_kept_renews_the_lease_while_the_block_runs(redis_client: redis.Redis) -> None:
    leases = leases_with(redis_client, 0)
    assert leases.take("job-a", 0, lease_s=0.3)

    def lease_end() -> float:
        return float(redis_client.zscore(leases.leased, "job-a:0") or 0.0)

    taken = lease_end()
    with leases.kept("job-a", 0, lease_s=0.3):
        wait_for(lambda: lease_end() > taken, 60, "a renewal", step=0.01)
    renewed = lease_end()
    time.sleep(0.5)  # five renewal periods: the thread is gone, nothing renews it any more
    assert lease_end() == renewed
