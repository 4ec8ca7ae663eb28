"""How late admitted requests finish against their predicted finish, so the deadline rule learns
the wait model's error instead of taking the model as exact.

`wait_prediction.predict` is a rate model, and it errs in known ways: a step that prefills is
slower than the decode steps the meter averages, requests that arrive after a request slow the
steps it runs in, and the KV cache or the prefill budget can spread a queue over more steps
than its rows say. Where it is optimistic, a request admitted on it holds rows until its own
deadline aborts it: work done for nothing, in rows another request could have used. The
calibration keeps, for the last `window` requests admitted beside other work (a request that
runs alone is never shed for its deadline, so its error changes no decision), the ratio of the
time it took to the finish predicted at its arrival; a request aborted at its deadline counts
with its deadline (a lower bound of its time). `factor()` is a high quantile of those ratios,
within `bounds`: the deadline rule sheds a request when its predicted finish times the factor
is past its deadline, so about `1 - quantile` of the requests admitted near their deadline
still miss it. Until `min_samples` requests have been seen the factor is 1 (the model as is).
Plain Python, no clock (the caller times the requests); safe to share between threads (the
event loop records, a metrics scrape reads).
"""

from __future__ import annotations

import math
import threading
from collections import deque

DEFAULT_WINDOW = 256
DEFAULT_QUANTILE = 0.9
DEFAULT_MIN_SAMPLES = 32
# A factor outside these would mean the model, not its error, is wrong: they bound how far one
# bad stretch of traffic (a stall) can move the rule.
DEFAULT_BOUNDS = (0.5, 4.0)


class FinishCalibration:
    def __init__(
        self,
        window: int = DEFAULT_WINDOW,
        quantile: float = DEFAULT_QUANTILE,
        min_samples: int = DEFAULT_MIN_SAMPLES,
        bounds: tuple[float, float] = DEFAULT_BOUNDS,
    ) -> None:
        if window < 1:
            raise ValueError("window must be >= 1")
        if not 0 < quantile <= 1:
            raise ValueError("quantile must be in (0, 1]")
        if not 1 <= min_samples <= window:
            raise ValueError("min_samples must be in 1..window")
        low, high = bounds
        if not 0 < low <= 1 <= high < math.inf:
            raise ValueError("bounds must satisfy 0 < low <= 1 <= high < inf")
        self.quantile = quantile
        self.min_samples = min_samples
        self.bounds = bounds
        self._lock = threading.Lock()
        self._ratios: deque[float] = deque(maxlen=window)
        self._factor: float | None = 1.0  # None: recompute at the next read

    @property
    def samples(self) -> int:
        return len(self._ratios)

    def record(self, predicted_s: float, actual_s: float) -> None:
        """A request admitted on a predicted finish of `predicted_s` took `actual_s` (its
        deadline where that aborted it). Predictions of no time say nothing of the model's
        error and are left out."""
        if not (predicted_s > 0 and math.isfinite(predicted_s) and math.isfinite(actual_s)):
            return
        with self._lock:
            self._ratios.append(max(0.0, actual_s) / predicted_s)
            self._factor = None

    def factor(self) -> float:
        """What predicted finishes are multiplied by before they are held against deadlines."""
        with self._lock:
            if self._factor is None:
                self._factor = self._quantile_factor()
            return self._factor

    def _quantile_factor(self) -> float:
        if len(self._ratios) < self.min_samples:
            return 1.0
        ordered = sorted(self._ratios)
        at = min(len(ordered) - 1, math.ceil(self.quantile * len(ordered)) - 1)
        low, high = self.bounds
        return min(high, max(low, ordered[at]))
