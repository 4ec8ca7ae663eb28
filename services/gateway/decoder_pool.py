"""Async gRPC client pool over the decoder replicas.

Each call tries the replica with the least outstanding work first (`replica_choice`: rows x steps
of this pool's calls in flight on it, then its reported GetInfo load; ties round robin), replicas
cooling down after an UNAVAILABLE last; a call that a replica could not take (UNAVAILABLE,
RESOURCE_EXHAUSTED) moves on to the next one while the retry budget
(attempts and seconds) lasts. With `max_in_flight`, a replica that already has that many
Generate / Recommend calls from this pool is skipped like one that answered RESOURCE_EXHAUSTED:
when every replica is full the call fails at once with a 429, so excess load is shed at the
gateway instead of queueing without bound (and a slow replica stops getting new calls).
Generate and Recommend are stateless, so a retry is always safe. Every failure leaves as an
`ApiError` (see `grpc_status`). Usable outside the HTTP app too (the batch worker): create,
`await start()` inside the event loop that will use it, `await close()`. Channels carry what
`security` says (TLS, the decoder's bearer token); `from_settings` reads it from the
`WIDEBEAM_DECODER_AUTH_TOKEN[_FILE]` / `WIDEBEAM_DECODER_CLIENT_TLS_*` variables.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import empty_pb2

from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2 as pb
from widebeam.services.decoder.proto.widebeam.decoder.v1 import decoder_pb2_grpc as pb_grpc
from widebeam.services.decoder.security.client import ChannelSecurity
from widebeam.services.gateway.grpc_status import RETRYABLE, decoder_retry_after, to_api_error
from widebeam.services.gateway.replica_choice import (
    DEFAULT_MAX_NEW_TOKENS,
    DEFAULT_RECOMMEND_N,
    UNKNOWN_SID_LENGTH,
    ReplicaLoad,
    call_work,
    replica_order,
)
from widebeam.services.gateway.server_timing import record_decoder_call
from widebeam.services.gateway.settings import GatewaySettings
from widebeam.services.http.errors import ApiError, retry_later

log = logging.getLogger(__name__)

# (method, replica address, status code name) after every decoder call, for metrics.
CallObserver = Callable[[str, str, str], None]


@dataclass
class Replica:
    address: str
    stub: pb_grpc.DecoderStub
    channel: grpc.aio.Channel
    down_until: float = 0.0  # monotonic; while in the future, tried only as a last resort
    info: pb.GetInfoResponse | None = None  # latest GetInfo answer (set by the poller)
    in_flight: int = 0  # Generate / Recommend calls of this pool on the replica now
    outstanding_work: int = 0  # rows x steps of those calls

    @property
    def reported_load(self) -> int:
        """Rows in use + waiting requests in its latest GetInfo (0 before one answered)."""
        if self.info is None or not self.info.HasField("load"):
            return 0
        return self.info.load.rows_in_use + self.info.load.waiting_requests

    @property
    def up(self) -> bool:
        return time.monotonic() >= self.down_until


class DecoderPool:
    def __init__(
        self,
        addresses: list[str],
        *,
        deadline_s: float = 30.0,
        retry_attempts: int = 3,
        retry_budget_s: float = 5.0,
        retry_after_s: int = 1,
        max_message_bytes: int = 64 << 20,
        cooldown_s: float = 1.0,
        observer: CallObserver | None = None,
        max_in_flight: int | None = None,
        security: ChannelSecurity | None = None,
    ) -> None:
        if not addresses:
            raise ValueError("a decoder pool needs at least one address")
        self.addresses = list(addresses)
        self.deadline_s = deadline_s
        self.retry_attempts = retry_attempts
        self.retry_budget_s = retry_budget_s
        self.retry_after_s = retry_after_s
        self.max_message_bytes = max_message_bytes
        self.cooldown_s = cooldown_s
        self.observer = observer
        self.max_in_flight = max_in_flight  # per replica; None = no limit
        self.security = security or ChannelSecurity()  # default: plaintext, no token
        self.replicas: list[Replica] = []
        self._next = itertools.count()

    @classmethod
    def from_settings(
        cls,
        settings: GatewaySettings,
        observer: CallObserver | None = None,
        security: ChannelSecurity | None = None,
    ) -> DecoderPool:
        return cls(
            settings.decoders,
            deadline_s=settings.request_timeout_s,
            retry_attempts=settings.retry_attempts,
            retry_budget_s=settings.retry_budget_s,
            retry_after_s=settings.retry_after_s,
            max_message_bytes=settings.max_message_bytes,
            observer=observer,
            max_in_flight=settings.max_in_flight_per_decoder,
            security=security or ChannelSecurity.from_env(),
        )

    async def start(self) -> DecoderPool:
        # Short reconnect backoff: a restarted replica should be used again within a second,
        # not after gRPC's default back-off of up to two minutes.
        options = [
            ("grpc.max_receive_message_length", self.max_message_bytes),
            ("grpc.max_send_message_length", self.max_message_bytes),
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.min_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 1000),
        ]
        for address in self.addresses:
            channel = self.security.aio_channel(address, options)
            self.replicas.append(Replica(address, pb_grpc.DecoderStub(channel), channel))
        return self

    async def close(self) -> None:
        for replica in self.replicas:
            await replica.channel.close()
        self.replicas = []

    # ----- calls ---------------------------------------------------------------------------
    async def generate(
        self, request: pb.GenerateRequest, timeout: float | None = None
    ) -> pb.GenerateResponse:
        response: pb.GenerateResponse = await self._call("Generate", request, timeout)
        return response

    async def recommend(
        self, request: pb.RecommendRequest, timeout: float | None = None
    ) -> pb.RecommendResponse:
        response: pb.RecommendResponse = await self._call("Recommend", request, timeout)
        return response

    async def info(self, timeout: float | None = None) -> pb.GetInfoResponse:
        response: pb.GetInfoResponse = await self._call("GetInfo", empty_pb2.Empty(), timeout)
        return response

    async def info_of(self, replica: Replica, timeout: float) -> pb.GetInfoResponse | None:
        """GetInfo of one replica (no retry); None when it does not answer. Keeps its state."""
        try:
            info: pb.GetInfoResponse = await replica.stub.GetInfo(
                empty_pb2.Empty(), timeout=timeout
            )
        except grpc.aio.AioRpcError as exc:
            self._observe("GetInfo", replica.address, exc.code().name)
            replica.info = None
            if exc.code() == grpc.StatusCode.UNAVAILABLE:
                replica.down_until = time.monotonic() + self.cooldown_s
            return None
        replica.info, replica.down_until = info, 0.0
        return info

    def latest_info(self) -> pb.GetInfoResponse | None:
        """The most recent GetInfo of any replica that answered its last poll."""
        return next((r.info for r in self.replicas if r.info is not None), None)

    # ----- load shedding ---------------------------------------------------------------------
    def saturated(self) -> bool:
        """Every replica has `max_in_flight` calls: a Generate / Recommend now would be refused."""
        limit = self.max_in_flight
        return (
            limit is not None
            and bool(self.replicas)
            and all(r.in_flight >= limit for r in self.replicas)
        )

    def saturated_error(self) -> ApiError:
        return to_api_error(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            f"every decoder already has {self.max_in_flight} requests of this gateway in flight "
            "(its max_in_flight_per_decoder)",
            self.retry_after_s,
        )

    # ----- retry loop ----------------------------------------------------------------------
    def _order(self) -> list[Replica]:
        if not self.replicas:
            raise retry_later(503, "the decoder pool is closed", "decoder_unavailable", 1)
        replicas = list(self.replicas)
        loads = [ReplicaLoad(r.up, r.outstanding_work, r.reported_load) for r in replicas]
        return [replicas[i] for i in replica_order(loads, next(self._next))]

    def _work(self, request: Any) -> int:
        """Rows x steps the call will take on a replica (0 for GetInfo: not counted)."""
        if isinstance(request, pb.GenerateRequest):
            beam = request.beam_width if request.HasField("beam_width") else 1
            steps = (
                request.max_new_tokens
                if request.HasField("max_new_tokens")
                else DEFAULT_MAX_NEW_TOKENS
            )
            return call_work(beam, steps)
        if isinstance(request, pb.RecommendRequest):
            n = request.n if request.HasField("n") else DEFAULT_RECOMMEND_N
            beam = request.beam_width if request.HasField("beam_width") else n
            info = self.latest_info()
            levels = len(info.sid_layout.levels) if info is not None else 0
            return call_work(beam, levels or UNKNOWN_SID_LENGTH)
        return 0

    async def _call(self, method: str, request: Any, timeout: float | None) -> Any:
        started = time.monotonic()
        deadline = started + (self.deadline_s if timeout is None else timeout)
        failures: dict[grpc.StatusCode, str] = {}
        hinted: int | None = None  # the soonest Retry-After a shedding decoder gave
        tries = 0
        work = self._work(request)
        for replica in self._order():
            remaining = deadline - time.monotonic()
            if tries and (
                tries > self.retry_attempts
                or time.monotonic() - started > self.retry_budget_s
                or remaining <= 0
            ):
                break
            if self._full(replica, method):
                failures[grpc.StatusCode.RESOURCE_EXHAUSTED] = (
                    f"{replica.address} already has {self.max_in_flight} requests of this "
                    "gateway in flight (its max_in_flight_per_decoder)"
                )
                continue
            tries += 1
            try:
                response = await self._invoke(replica, method, request, remaining, work)
            except grpc.aio.AioRpcError as exc:
                code = exc.code()
                self._observe(method, replica.address, code.name)
                if code not in RETRYABLE:
                    raise to_api_error(code, exc.details() or "", self.retry_after_s) from None
                if code == grpc.StatusCode.UNAVAILABLE:
                    replica.down_until = time.monotonic() + self.cooldown_s
                hint = decoder_retry_after(exc)
                if hint is not None:
                    hinted = hint if hinted is None else min(hinted, hint)
                log.info("%s on %s: %s; trying another replica", method, replica.address, code.name)
                failures[code] = exc.details() or ""
                continue
            self._observe(method, replica.address, "OK")
            replica.down_until = 0.0
            if isinstance(response, pb.GetInfoResponse):  # fresher than the poller's copy
                replica.info = response
            return response
        raise self._exhausted(failures, self.retry_after_s if hinted is None else hinted)

    def _full(self, replica: Replica, method: str) -> bool:
        limit = self.max_in_flight
        return limit is not None and method != "GetInfo" and replica.in_flight >= limit

    async def _invoke(
        self, replica: Replica, method: str, request: Any, timeout: float, work: int
    ) -> Any:
        replica.in_flight += 1
        replica.outstanding_work += work
        started = time.perf_counter()
        try:
            return await getattr(replica.stub, method)(request, timeout=timeout)
        finally:
            replica.in_flight -= 1
            replica.outstanding_work -= work
            if method != "GetInfo":  # a request's own work, not the poller's
                record_decoder_call(time.perf_counter() - started)

    def _exhausted(self, failures: dict[grpc.StatusCode, str], retry_after_s: int) -> ApiError:
        # Overload anywhere wins: the client should slow down, not assume an outage.
        for code in (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE):
            if code in failures:
                return to_api_error(code, failures[code], retry_after_s)
        return to_api_error(grpc.StatusCode.DEADLINE_EXCEEDED, "", self.retry_after_s)

    def _observe(self, method: str, address: str, code: str) -> None:
        if self.observer is not None:
            self.observer(method, address, code)
