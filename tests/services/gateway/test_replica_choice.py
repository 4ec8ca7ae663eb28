"""The replica-choice rule on its own, with made-up loads."""

from __future__ import annotations

from collections import Counter

from widebeam.services.gateway.replica_choice import ReplicaLoad, call_work, replica_order


def idle(up: bool = True) -> ReplicaLoad:
    return ReplicaLoad(up=up, outstanding_work=0, reported_load=0)


def test_least_outstanding_work_first() -> None:
    loads = [
        ReplicaLoad(True, outstanding_work=8 * 150, reported_load=8),
        ReplicaLoad(True, outstanding_work=4 * 3, reported_load=4),
        ReplicaLoad(True, outstanding_work=0, reported_load=0),
    ]
    for rotation in range(6):
        assert replica_order(loads, rotation) == [2, 1, 0]


def test_reported_load_breaks_a_tie_in_own_work() -> None:
    # Another gateway (worker) keeps replica 0 busy: this one's own calls do not show it.
    loads = [ReplicaLoad(True, 0, reported_load=12), ReplicaLoad(True, 0, reported_load=0)]
    assert replica_order(loads, 0) == [1, 0]
    assert replica_order(loads, 1) == [1, 0]
    # Own work, exact and live, outranks the polled report.
    loads = [ReplicaLoad(True, 0, reported_load=12), ReplicaLoad(True, 5, reported_load=0)]
    assert replica_order(loads, 1) == [0, 1]


def test_equal_replicas_share_calls_round_robin() -> None:
    loads = [idle(), idle(), idle()]
    firsts = Counter(replica_order(loads, rotation)[0] for rotation in range(9))
    assert firsts == {0: 3, 1: 3, 2: 3}
    assert replica_order(loads, 4) == [1, 2, 0]  # the rest of the ring follows


def test_ties_among_the_least_loaded_only() -> None:
    loads = [ReplicaLoad(True, 40, 0), idle(), idle()]
    firsts = Counter(replica_order(loads, rotation)[0] for rotation in range(6))
    assert firsts == {1: 3, 2: 3}


def test_replicas_cooling_down_come_last_whatever_their_load() -> None:
    loads = [idle(up=False), ReplicaLoad(True, 500, 9), idle(up=False), ReplicaLoad(True, 1, 0)]
    assert replica_order(loads, 0) == [3, 1, 0, 2]
    assert replica_order(loads, 2) == [3, 1, 2, 0]  # down ones in ring order
    assert replica_order([idle(up=False)], 7) == [0]  # a last resort is still tried


def test_no_replicas() -> None:
    assert replica_order([], 3) == []


def test_call_work_is_rows_times_steps_and_never_zero() -> None:
    assert call_work(8, 150) == 1200
    assert call_work(512, 3) == 1536
    assert call_work(0, 0) == 1
