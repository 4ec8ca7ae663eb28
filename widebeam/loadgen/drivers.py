"""The two ways to drive the stack.

- Closed loop (`closed_loop`): N clients, each sends its next request when the previous one is
  answered. Throughput at enough clients = the stack's capacity.
- Open loop (`open_loop`): requests leave at a fixed average rate (Poisson arrivals) whatever
  the stack does, as independent users would; this is what overload looks like. Latency is
  measured from the moment a request is due, so a generator that falls behind its schedule
  shows up as latency rather than hiding it (no coordinated omission)."""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from widebeam.loadgen.checks import problem
from widebeam.loadgen.http_client import HttpClient, ProtocolError, TooManyConnections
from widebeam.loadgen.outcomes import Outcome
from widebeam.loadgen.traffic import Call

_TRANSPORT_ERRORS = (
    OSError,
    EOFError,
    asyncio.IncompleteReadError,
    asyncio.LimitOverrunError,
    ProtocolError,
    TooManyConnections,
    ValueError,
)


@dataclass
class Sender:
    """Sends one call and records its outcome (status, latency, whether the answer is right)."""

    client: HttpClient
    items: AbstractSet[str] = frozenset()
    timeout_s: float = 60.0
    outcomes: list[Outcome] = field(default_factory=list)

    async def send(self, call: Call, due: float, origin: float) -> Outcome:
        """`due`: monotonic time the request was meant to leave; `origin`: phase start."""
        try:
            response = await asyncio.wait_for(
                self.client.post(call.path, call.body), self.timeout_s
            )
        except TimeoutError:
            outcome = Outcome(call.kind, due - origin, time.monotonic() - due, 0, "timeout")
        except _TRANSPORT_ERRORS as exc:
            failure = f"no answer: {type(exc).__name__}"
            outcome = Outcome(call.kind, due - origin, time.monotonic() - due, 0, failure)
        else:
            latency = time.monotonic() - due
            found = problem(call, response, self.items)
            outcome = Outcome(call.kind, due - origin, latency, response.status, found)
        self.outcomes.append(outcome)
        return outcome


async def closed_loop(
    sender: Sender,
    calls: Sequence[Call],
    concurrency: int,
    duration_s: float,
    max_requests: int | None = None,
) -> float:
    """`concurrency` clients until `duration_s` passed or `max_requests` were sent; returns the
    elapsed time. A client whose request was not admitted waits 10 ms (no busy loop)."""
    source = itertools.cycle(calls)
    origin = time.monotonic()
    end = origin + duration_s
    budget = itertools.count() if max_requests is None else iter(range(max_requests))

    async def client() -> None:
        while time.monotonic() < end and next(budget, None) is not None:
            outcome = await sender.send(next(source), time.monotonic(), origin)
            if outcome.status != 200:
                await asyncio.sleep(0.01)

    await asyncio.gather(*(client() for _ in range(concurrency)))
    return time.monotonic() - origin


async def open_loop(
    sender: Sender, calls: Sequence[Call], rate: float, duration_s: float, seed: int = 0
) -> float:
    """Poisson arrivals at `rate` per second for `duration_s`; waits for the last answers.
    Returns the sending time (the phase's duration)."""
    if rate <= 0:
        raise ValueError("the open-loop rate must be positive")
    rng = random.Random(seed)
    source = itertools.cycle(calls)
    tasks: set[asyncio.Task[Outcome]] = set()
    origin = time.monotonic()
    due = origin
    while True:
        due += rng.expovariate(rate)
        if due - origin >= duration_s:
            break
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        task = asyncio.create_task(sender.send(next(source), due, origin))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    sending = time.monotonic() - origin
    if tasks:
        await asyncio.wait(tasks)
    return max(sending, duration_s)
