"""`guarded_protocol(policy)`: uvicorn's h11 protocol with the connection guard enforced.

uvicorn's h11 protocol waits for a request head for ever (slowloris: a byte now and then holds
a connection, and enough of them exhaust the file descriptors), waits for a stalled body for
ever, and accepts any number of connections. Here, per connection:

- admission: over `max_connections_per_client` from its address, 429; over `max_connections`
  in all, 503; either closes the connection at once;
- head deadline: a new connection, and every request head begun on a kept-alive one, has
  `header_timeout_s` to deliver its whole head; then 408 (silence when nothing came) and close;
- body stall: while the server waits for body bytes, none for `body_timeout_s` is a 408 and
  close, and the app sees the client gone (what it buffered is freed). A wait that is the
  app's (it has not asked for more, or not yet for a `100 Continue` body) is not a stall, and
  the client's `body_timeout_s` counts from when the app asks;
- answered early: once the app has answered (a 401 before the body, a 413), the unread rest of
  the body is not buffered, and more than `UNREAD_BODY_LIMIT` of it closes the connection.

The idle time between requests stays uvicorn's keep-alive timeout (`timeout_keep_alive`)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from widebeam.services.http.connections.counts import ConnectionCounts, Refusal
from widebeam.services.http.connections.policy import ConnectionPolicy
from widebeam.services.http.connections.raw_response import raw_error
from widebeam.services.http.errors import ApiError, retry_later

log = logging.getLogger("widebeam.http.connections")

# Unread body bytes after the app answered that are read (and dropped) rather than cutting the
# connection: a small body sent with a wrong key still gets its 401 and keeps the connection.
UNREAD_BODY_LIMIT = 1 << 20
RETRY_AFTER_S = 1


def guarded_protocol(policy: ConnectionPolicy) -> type[GuardedH11Protocol]:
    """A protocol class for one server (uvicorn's `Config(http=...)`): its own counts."""
    counts = ConnectionCounts(policy.max_connections, policy.max_connections_per_client)
    return type("GuardedH11Protocol", (GuardedH11Protocol,), {"policy": policy, "counts": counts})


class GuardedH11Protocol(H11Protocol):
    policy: ClassVar[ConnectionPolicy]
    counts: ClassVar[ConnectionCounts]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._peer: str | None = None  # the address holding a slot in `counts`
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        # The app held the body back when the body timer last fired (it had not asked for more
        # or for a `100 Continue` body yet): the client's time starts when the app asks.
        self._body_held_by_app = False
        self._unread_body_bytes = 0

    # asyncio protocol interface

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        peer = self.client[0] if self.client else "local"
        refusal = self.counts.admit(peer)
        if refusal is not None:
            self._refuse(peer, refusal)
            return
        self._peer = peer
        self._head_timer = self.loop.call_later(self.policy.header_timeout_s, self._head_late)

    def data_received(self, data: bytes) -> None:
        if self.conn.our_state is h11.DONE and self.conn.their_state is h11.SEND_BODY:
            self._unread_body_bytes += len(data)
            if self._unread_body_bytes > UNREAD_BODY_LIMIT:
                self._close()
                return
        super().data_received(data)
        self._watch()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self._cancel_timers()
        if self._peer is not None:
            self.counts.release(self._peer)
            self._peer = None

    def on_response_complete(self) -> None:
        if self.cycle is not None:
            self.cycle.body = bytearray()  # the app has answered: it never reads the rest
        super().on_response_complete()  # may start a pipelined request
        self._watch()

    # the guard

    def _watch(self) -> None:
        """Arm the timer of what the connection now waits for from the client."""
        if self.transport.is_closing():
            return
        state = self.conn.their_state
        if state is h11.SEND_BODY:
            self._cancel_head_timer()
            self._restart_body_timer()
            return
        self._cancel_body_timer()
        self._unread_body_bytes = 0
        if state is not h11.IDLE:  # a whole request is in: the app's turn
            self._cancel_head_timer()
        elif self._head_timer is None and self.timeout_keep_alive_task is None:
            # Bytes came after the keep-alive wait (uvicorn stops its timer on any byte): a
            # new head has begun, and its deadline covers the whole head, not each byte.
            self._head_timer = self.loop.call_later(self.policy.header_timeout_s, self._head_late)

    def _head_begun(self) -> bool:
        buffered, _ = self.conn.trailing_data
        return bool(buffered)

    def _head_late(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        timeout = self.policy.header_timeout_s
        if self._head_begun():
            log.info("%s: no complete request head within %gs; closed", self._peer, timeout)
            message = f"the request head (request line and headers) took over {timeout:g}s"
            self.transport.write(raw_error(ApiError(408, message, "request_timeout")))
        else:
            log.info("%s: no request within %gs of connecting; closed", self._peer, timeout)
        self._close()

    def _restart_body_timer(self) -> None:
        self._cancel_body_timer()
        self._body_held_by_app = False
        self._body_timer = self.loop.call_later(self.policy.body_timeout_s, self._body_stalled)

    def _body_stalled(self) -> None:
        self._body_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.SEND_BODY:
            return
        cycle = self.cycle
        app_waits = cycle is not None and cycle.waiting_for_100_continue
        if self.flow.read_paused or app_waits:  # the app has not asked for more: not a stall
            self._restart_body_timer()
            self._body_held_by_app = True
            return
        if self._body_held_by_app:
            # The app asked since the last check, maybe just now (its `100 Continue` or its read
            # after a pause as long as the timer's period): a whole period from now, so the
            # client has at least `body_timeout_s` from the moment it may send.
            self._restart_body_timer()
            return
        timeout = self.policy.body_timeout_s
        log.info("%s: request body stalled for %gs; closed", self._peer, timeout)
        if cycle is not None and not cycle.response_started:
            message = f"the request body stalled: no bytes for {timeout:g}s"
            self.transport.write(raw_error(ApiError(408, message, "request_timeout")))
        if cycle is not None and not cycle.response_complete:
            # The app sees the client gone now (http.disconnect) and drops what it buffered;
            # anything it still sends is not written after the 408.
            cycle.disconnected = True
            cycle.message_event.set()
        self._close()

    def _refuse(self, peer: str, refusal: Refusal) -> None:
        if refusal is Refusal.CLIENT_FULL:
            limit = self.counts.max_per_client
            log.warning("%s: refused a connection, it has %d open already", peer, limit)
            message = f"too many open connections from your address (at most {limit})"
            status, code = 429, "too_many_connections"
        else:
            limit = self.counts.max_total
            log.warning("%s: refused a connection, the server has %d open", peer, limit)
            message = f"the server has its maximum of {limit} connections open; retry later"
            status, code = 503, "server_busy"
        self.transport.write(raw_error(retry_later(status, message, code, RETRY_AFTER_S)))
        self._close()

    def _close(self) -> None:
        self._cancel_timers()
        self.transport.close()  # connection_lost tells h11 and the app

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _cancel_body_timer(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _cancel_timers(self) -> None:
        self._cancel_head_timer()
        self._cancel_body_timer()
