"""Send every sample to the gateway, ``concurrency`` at a time, with a progress bar.

Latency is the client's wall time of a sample's call (retries included); QPS is answered samples
over the wall time of the measured phase (after ``warmup`` requests, whose answers are not
scored). Past ``max_errors`` failed samples the run stops with the first error's message.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from tqdm import tqdm

from widebeam.eval.client import GatewayClient, GatewayError
from widebeam.eval.predictions import Prediction, RequestSettings, prediction, request_body
from widebeam.eval.samples import EvalSample, Level, Route


@dataclass(frozen=True)
class RunSettings:
    url: str
    concurrency: int = 8
    timeout_s: float = 120.0
    retries: int = 3
    max_errors: int = 10
    warmup: int = 0
    api_key: str | None = None
    progress: bool = True


@dataclass(frozen=True)
class Outcome:
    sample: EvalSample
    prediction: Prediction | None  # None when the request failed
    latency_s: float
    retries: int = 0
    error: str | None = None


@dataclass(frozen=True)
class RunResult:
    outcomes: tuple[Outcome, ...]  # in sample order
    wall_s: float
    request: RequestSettings  # as sent (the chat route's model filled in)


class EvalAborted(RuntimeError):
    """Too many samples failed; the message is the first failure."""


def run(
    samples: Sequence[EvalSample], level: Level, request: RequestSettings, settings: RunSettings
) -> RunResult:
    return asyncio.run(_run(samples, level, request, settings))


async def _run(
    samples: Sequence[EvalSample], level: Level, request: RequestSettings, settings: RunSettings
) -> RunResult:
    client = GatewayClient(settings.url, settings.api_key, settings.timeout_s, settings.retries,
                           connections=max(settings.concurrency, 1) + 1)  # fmt: skip
    try:
        if request.model is None and any(s.route == Route.CHAT for s in samples):
            request = _with_model(request, await client.get("/v1/models"))
        for sample in samples[: settings.warmup]:
            await _one(client, sample, level, request)
        start = time.perf_counter()
        outcomes = await _all(client, samples, level, request, settings)
        return RunResult(tuple(outcomes), time.perf_counter() - start, request)
    finally:
        await client.close()


async def _all(
    client: GatewayClient,
    samples: Sequence[EvalSample],
    level: Level,
    request: RequestSettings,
    settings: RunSettings,
) -> list[Outcome]:
    results: list[Outcome | None] = [None] * len(samples)
    pending = iter(range(len(samples)))
    errors: list[str] = []
    bar = tqdm(total=len(samples), unit="req", file=sys.stderr, disable=not settings.progress,
               desc="widebeam eval", dynamic_ncols=True)  # fmt: skip

    async def worker() -> None:
        for i in pending:
            if len(errors) > settings.max_errors:
                return
            outcome = await _one(client, samples[i], level, request)
            results[i] = outcome
            if outcome.error is not None:
                errors.append(outcome.error)
            bar.update(1)
            bar.set_postfix(errors=len(errors), refresh=False)

    try:
        await asyncio.gather(*(worker() for _ in range(max(settings.concurrency, 1))))
    finally:
        bar.close()
    if len(errors) > settings.max_errors:
        raise EvalAborted(f"{len(errors)} requests failed (more than --max-errors "
                          f"{settings.max_errors}); the first: {errors[0]}")  # fmt: skip
    return [r for r in results if r is not None]


async def _one(
    client: GatewayClient, sample: EvalSample, level: Level, request: RequestSettings
) -> Outcome:
    body = request_body(sample, request)
    start = time.perf_counter()
    try:
        answer, retries = await client.post(sample.route, body)
        latency = time.perf_counter() - start
        return Outcome(sample, prediction(sample.route, level, answer), latency, retries)
    except GatewayError as exc:
        return Outcome(
            sample, None, time.perf_counter() - start, error=f"{sample.sample_id}: {exc}"
        )
    except (KeyError, TypeError, ValueError) as exc:
        error = f"{sample.sample_id}: unexpected answer shape from {sample.route} ({exc!r})"
        return Outcome(sample, None, time.perf_counter() - start, error=error)


def _with_model(request: RequestSettings, models: dict[str, object]) -> RequestSettings:
    data = models.get("data")
    if not isinstance(data, list) or not data or not isinstance(data[0], dict):
        raise GatewayError(f"/v1/models names no model to send chat requests to: {models!r:.200}")
    return replace(request, model=str(data[0]["id"]))
