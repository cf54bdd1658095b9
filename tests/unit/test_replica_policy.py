"""Replica order, penalties and the hedging threshold (pure bookkeeping, the clock passed in)."""

from __future__ import annotations

import pytest

from hdfsfuse.datanode.replicas import HEDGE_DEFAULT, HEDGE_FLOOR, SLOW_MEMORY, ReplicaPolicy

R = [("a:1", "A"), ("b:1", "B"), ("c:1", "C")]


def test_namenode_order_by_default_and_dead_last() -> None:
    p = ReplicaPolicy()
    assert p.order(R, set(), 0.0) == R
    assert [a for a, _ in p.order(R, {"a:1"}, 0.0)] == ["b:1", "c:1", "a:1"]


def test_connect_refusals_are_a_short_global_penalty() -> None:
    p = ReplicaPolicy(connect_penalty=3.0)
    p.refused("a:1", now=10.0)
    assert [a for a, _ in p.order(R, set(), 11.0)] == ["b:1", "c:1", "a:1"]
    assert [a for a, _ in p.order(R, {"b:1"}, 11.0)] == ["c:1", "a:1", "b:1"]  # per-block failures rank lower
    assert p.order(R, set(), 13.5) == R  # expired


def test_a_slow_datanode_goes_last_while_its_measurement_is_recent() -> None:
    p = ReplicaPolicy()
    p.record("a:1", 4096, 0.200, now=1.0)
    p.record("b:1", 4096, 0.001, now=1.0)
    p.record("c:1", 4096, 0.002, now=1.0)
    assert [a for a, _ in p.order(R, set(), 2.0)] == ["b:1", "c:1", "a:1"]
    assert p.order(R, set(), 1.0 + SLOW_MEMORY + 1) == R


def test_one_pause_of_a_fast_datanode_does_not_demote_it() -> None:
    p = ReplicaPolicy()
    for address in ("a:1", "b:1", "c:1"):
        p.record(address, 4096, 0.001, now=0.0)
    p.record("a:1", 4096, 0.060, now=1.0)  # a GC pause: 0.001 + 0.2 * 0.059 = 12.8 ms, under the floor
    assert p.order(R, set(), 2.0) == R
    p.record("a:1", 4096, 0.060, now=1.5)
    p.record("a:1", 4096, 0.060, now=1.6)  # slow again and again: now it goes last
    assert [a for a, _ in p.order(R, set(), 2.0)] == ["b:1", "c:1", "a:1"]


def test_hedging_threshold() -> None:
    assert ReplicaPolicy(hedge_after=None).hedge_after(4096) is None
    assert ReplicaPolicy(hedge_after=0.02).hedge_after(4096) == 0.02
    p = ReplicaPolicy()
    assert p.hedge_after(4096) == HEDGE_DEFAULT  # nothing measured yet
    p.record("a:1", 4096, 0.001, now=0.0)
    assert p.hedge_after(4096) == HEDGE_FLOOR
    p.record("b:1", 4096, 0.100, now=0.0)
    p.record("a:1", 4096, 0.100, now=0.0)  # a moving average: 0.001 + 0.2 * (0.100 - 0.001)
    assert p.hedge_after(4096) == pytest.approx(5 * (0.001 + 0.2 * 0.099))
    p.record("a:1", 8 * 1024 * 1024, 1.0, now=0.0)  # large reads scale the threshold by size
    assert p.hedge_after(8 * 1024 * 1024) > p.hedge_after(4096)
    assert set(p.snapshot()) == {"a:1", "b:1"}
