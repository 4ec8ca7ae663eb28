"""`Server-Timing` on every gateway response: where a request's time went, for the caller.

    Server-Timing: decoder;dur=182.4;desc="1 call", app;dur=190.1

`app` is the gateway's time from the request's arrival in the app (its headers parsed) to the
response's start; `decoder` the time its decoder calls took (every attempt, summed; absent
when it made none). A client that also times the whole exchange gets the rest (its own queue,
the network, the gateway's event loop before the request reached the app) by difference, which
is how `bench/stack.py` splits an overloaded sweep's latency. A streamed response starts before
its decoding ends, so its header holds what was spent until then. Off with
`server_timing = false` (it tells a caller how long the decoders took).
"""

from __future__ import annotations

import time
from contextvars import ContextVar
from dataclasses import dataclass

from starlette.types import Message, Receive, Scope, Send

from widebeam.services.gateway.middleware import HttpOnlyMiddleware

HEADER = b"server-timing"


@dataclass
class RequestTiming:
    decoder_s: float = 0.0
    decoder_calls: int = 0


# The request being served in this task (None outside a request, or with the header off). The
# pool's calls run in the request's task or in tasks it starts, which copy the context: the
# same object is found there.
_current: ContextVar[RequestTiming | None] = ContextVar("widebeam_request_timing", default=None)


def record_decoder_call(seconds: float) -> None:
    """One decoder call's duration, counted for the request this task serves (if any)."""
    timing = _current.get()
    if timing is not None:
        timing.decoder_s += seconds
        timing.decoder_calls += 1


def header_value(timing: RequestTiming, app_s: float) -> str:
    entries = []
    if timing.decoder_calls:
        calls = "1 call" if timing.decoder_calls == 1 else f"{timing.decoder_calls} calls"
        entries.append(f'decoder;dur={timing.decoder_s * 1000:.1f};desc="{calls}"')
    entries.append(f"app;dur={app_s * 1000:.1f}")
    return ", ".join(entries)


class ServerTimingMiddleware(HttpOnlyMiddleware):
    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        timing = RequestTiming()
        token = _current.set(timing)

        async def send_with_timing(message: Message) -> None:
            if message["type"] == "http.response.start":
                value = header_value(timing, time.perf_counter() - started)
                headers = [*message.get("headers", ()), (HEADER, value.encode())]
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_with_timing)
        finally:
            _current.reset(token)
