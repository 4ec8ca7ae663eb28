"""The launcher's restart accounting: doubling back-off, reset after a stable run, give-up."""

from __future__ import annotations

import pytest

from widebeam.launcher.restart_policy import RestartPolicy, RestartState


def test_back_off_doubles_up_to_the_cap_then_gives_up() -> None:
    policy = RestartPolicy(max_restarts=6, first_delay_s=1, max_delay_s=10)
    assert [policy.delay_before(n) for n in range(1, 8)] == [1, 2, 4, 8, 10, 10, None]


def test_a_stable_run_resets_the_count() -> None:
    state = RestartState(RestartPolicy(max_restarts=2, stable_after_s=60))
    assert state.crashed(now=100.0, ran_for_s=5) == 1
    assert not state.restart_due(100.5) and state.restart_due(101.0)
    state.restarted()
    assert state.due_at is None
    assert state.crashed(now=110.0, ran_for_s=5) == 2
    state.restarted()
    assert state.crashed(now=200.0, ran_for_s=90) == 1  # healthy for 90 s: a fresh start
    state.restarted()
    assert state.crashed(now=201.0, ran_for_s=1) == 2
    state.restarted()
    assert state.crashed(now=203.0, ran_for_s=1) is None  # a third crash in a row
    assert state.due_at is None


def test_zero_restarts_gives_up_at_the_first_death() -> None:
    assert RestartState(RestartPolicy(max_restarts=0)).crashed(now=0.0, ran_for_s=1000) is None


@pytest.mark.parametrize(
    "kwargs", [{"max_restarts": -1}, {"first_delay_s": 0}, {"first_delay_s": 5, "max_delay_s": 1}]
)
def test_bad_policies_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        RestartPolicy(**kwargs)  # type: ignore[arg-type]
