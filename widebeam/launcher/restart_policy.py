"""When the launcher restarts a child that died, and when it gives up (plain accounting).

A child that died is started again after a back-off that doubles with each consecutive crash
(1 s, 2 s, 4 s, ... up to `max_delay_s`). A child that then stays up for `stable_after_s` is
healthy again: its count of consecutive crashes starts from zero. After `max_restarts`
consecutive crashes the launcher stops the whole stack (a crash loop is a configuration error
to report, not to hide); `max_restarts=0` stops it at the first death."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RestartPolicy:
    max_restarts: int = 5
    first_delay_s: float = 1.0
    max_delay_s: float = 30.0
    stable_after_s: float = 60.0

    def __post_init__(self) -> None:
        if self.max_restarts < 0:
            raise ValueError("max_restarts must be >= 0")
        if not 0 < self.first_delay_s <= self.max_delay_s:
            raise ValueError("restart delays must satisfy 0 < first_delay_s <= max_delay_s")

    def delay_before(self, restart: int) -> float | None:
        """Seconds to wait before consecutive restart number `restart` (1-based); None: give up."""
        if restart > self.max_restarts:
            return None
        return min(self.first_delay_s * 2 ** (restart - 1), self.max_delay_s)


@dataclass
class RestartState:
    """One child's crash accounting under a policy."""

    policy: RestartPolicy
    consecutive: int = 0  # crashes since the child was last stable
    due_at: float | None = None  # monotonic time of the pending restart

    def crashed(self, now: float, ran_for_s: float) -> float | None:
        """Record a death after `ran_for_s` of life; returns the back-off, None to give up."""
        if ran_for_s >= self.policy.stable_after_s:
            self.consecutive = 0
        self.consecutive += 1
        delay = self.policy.delay_before(self.consecutive)
        self.due_at = None if delay is None else now + delay
        return delay

    def restart_due(self, now: float) -> bool:
        return self.due_at is not None and now >= self.due_at

    def restarted(self) -> None:
        self.due_at = None
