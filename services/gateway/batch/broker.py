"""The Celery broker transport of the batch jobs: kombu's Redis transport, made to ride out a
Redis that refuses commands instead of dying of it.

Redis out of memory (`maxmemory`, policy `noeviction`) refuses every write and, from Redis 7 on,
every command inside MULTI, kombu's own acknowledgement (ZREM + HDEL in a transaction)
included. kombu counts only a lost connection as "broker down": any other error in an ack, a
delivery's bookkeeping or a redelivery sweep escaped the worker's event loop, and the worker
exited ('Unrecoverable error') within a second of an OOM. Here:

- an ack is HDEL then ZREM without MULTI (neither is refused for memory; HDEL first, so a
  half-done ack leaves only an index entry, which a sweep drops);
- recording a delivery and requeueing a rejected message are retried while the error is
  transient (`redis_errors`), for `redis_retry_s`; past that a delivery is given up as a lost
  connection (the consumer reconnects; the chunk's lease entry brings it back, see
  `chunk_leases`), and a reject leaves the message unacked for the redelivery sweep;
- a redelivery sweep that fails is skipped until the next one;
- transient refusals count as connection errors wherever kombu or Celery check for those.

Selected by `create_celery` for every Redis URL (`broker_transport`); TLS (`rediss://` with
`ssl_cert_reqs`, as Celery's result backend requires anyway) works as with kombu's own."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import redis
from kombu.transport import redis as kombu_redis
from kombu.transport.virtual import base as virtual

from widebeam.services.gateway.batch.redis_errors import TRANSIENT_TYPES, is_transient

log = logging.getLogger(__name__)

TRANSPORT = "widebeam.services.gateway.batch.broker:Transport"
# Transport option: how long an ack, a delivery or a requeue rides out a refusing Redis.
RETRY_OPTION = "redis_retry_s"

_BACKOFF_FIRST_S = 0.05
_BACKOFF_CAP_S = 1.0


def ride_out(operation: Callable[[], Any], budget_s: float, what: str) -> Any:
    """`operation()`, tried again with capped exponential backoff while it fails with a
    transient Redis error, until `budget_s` has passed; then that error is raised."""
    deadline = time.monotonic() + budget_s
    delay = _BACKOFF_FIRST_S
    warned = False
    while True:
        try:
            return operation()
        except redis.RedisError as exc:
            if not is_transient(exc) or time.monotonic() + delay > deadline:
                raise
            if not warned:
                log.warning("Redis refused to %s (%s); retrying", what, type(exc).__name__)
                warned = True
            time.sleep(delay)
            delay = min(delay * 2, _BACKOFF_CAP_S)


class QoS(kombu_redis.QoS):
    @property
    def _budget_s(self) -> float:
        return float(getattr(self.channel, RETRY_OPTION))

    def append(self, message: Any, delivery_tag: str) -> None:
        try:
            ride_out(
                lambda: super(QoS, self).append(message, delivery_tag),
                self._budget_s,
                "record a delivered message",
            )
        except redis.RedisError as exc:
            # As a lost connection: the consumer reconnects instead of exiting.
            raise redis.ConnectionError(f"Redis refused a delivery: {exc}") from exc

    def ack(self, delivery_tag: str) -> None:
        try:
            ride_out(lambda: self._forget(delivery_tag), self._budget_s, "acknowledge a message")
        except redis.RedisError as exc:
            # Left unacked: the redelivery sweep hands it out again, and a run of a done
            # chunk writes nothing.
            log.warning("a message stays unacknowledged (%s)", type(exc).__name__)
        virtual.QoS.ack(self, delivery_tag)

    def reject(self, delivery_tag: str, requeue: bool = False) -> None:
        if requeue:
            operation, what = (
                lambda: self.restore_by_tag(delivery_tag, leftmost=True),
                "requeue a message",
            )
        else:
            operation, what = lambda: self._forget(delivery_tag), "drop a message"
        try:
            ride_out(operation, self._budget_s, what)
        except redis.RedisError as exc:
            log.warning("a rejected message stays unacknowledged (%s)", type(exc).__name__)
        virtual.QoS.ack(self, delivery_tag)

    def restore_visible(self, *args: Any, **kwargs: Any) -> None:
        try:
            super().restore_visible(*args, **kwargs)
        except redis.RedisError as exc:
            log.warning("redelivery sweep skipped (%s)", type(exc).__name__)

    def _forget(self, delivery_tag: str) -> None:
        with self.channel.conn_or_acquire() as client, client.pipeline(transaction=False) as pipe:
            pipe.hdel(self.unacked_key, delivery_tag)
            pipe.zrem(self.unacked_index_key, delivery_tag)
            pipe.execute()


class Channel(kombu_redis.Channel):
    QoS = QoS
    from_transport_options = (*kombu_redis.Channel.from_transport_options, RETRY_OPTION)
    redis_retry_s = 10.0


class Transport(kombu_redis.Transport):
    Channel = Channel
    connection_errors = (*kombu_redis.Transport.connection_errors, *TRANSIENT_TYPES)
