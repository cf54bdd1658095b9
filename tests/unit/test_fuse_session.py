"""pyfuse3's request loop on the facade (`hdfsfuse.fuse.session`), on a real trio loop with a
real pipe for the FUSE device: the lock and the readiness wait skip the scheduler only when
they may, and hand over, wait and cancel as trio's own do."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager

import pyfuse3
import pytest
import trio
import trio.testing

from hdfsfuse.fuse import session
from hdfsfuse.fuse.session import HandoverLock, LoopFacade, ReadinessProbe


class Turns(trio.abc.Instrument):
    """The calling task's steps: an await that gave the scheduler a turn starts a new one."""

    def __init__(self) -> None:
        self.task = trio.lowlevel.current_task()
        self.count = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task is self.task:
            self.count += 1

    async def took_a_turn(self, step: Awaitable[object]) -> bool:
        before = self.count
        await step
        return self.count != before


@contextmanager
def counting_turns() -> Iterator[Turns]:
    """(in the test's own task: pytest-trio runs fixtures in tasks of their own)"""
    instrument = Turns()
    trio.lowlevel.add_instrument(instrument)
    try:
        yield instrument
    finally:
        trio.lowlevel.remove_instrument(instrument)


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    r, w = os.pipe()
    yield r, w
    os.close(r)
    os.close(w)


async def test_a_free_lock_is_taken_without_a_turn_of_the_scheduler() -> None:
    lock = HandoverLock()
    with counting_turns() as turns:
        assert not await turns.took_a_turn(lock.__aenter__())
    assert lock.held
    await lock.__aexit__(None, None, None)
    assert not lock.held


async def test_waiters_take_the_lock_in_order_each_release_hands_it_over() -> None:
    lock = HandoverLock()
    order: list[int] = []
    inside = 0

    async def take(n: int) -> None:
        nonlocal inside
        async with lock:
            inside += 1
            assert inside == 1  # never two holders
            order.append(n)
            await trio.sleep(0)  # held across a turn: the others stay queued
            inside -= 1

    async with trio.open_nursery() as nursery:
        await lock.__aenter__()
        for n in range(3):
            nursery.start_soon(take, n)
            await trio.testing.wait_all_tasks_blocked()
        assert order == []
        await lock.__aexit__(None, None, None)
    assert order == [0, 1, 2]
    assert not lock.held


async def test_a_cancelled_waiter_does_not_take_the_lock() -> None:
    lock = HandoverLock()
    got: list[str] = []

    async def take(name: str, scope: trio.CancelScope) -> None:
        with scope:
            async with lock:
                got.append(name)

    first, second = trio.CancelScope(), trio.CancelScope()
    async with trio.open_nursery() as nursery:
        await lock.__aenter__()
        nursery.start_soon(take, "first", first)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(take, "second", second)
        await trio.testing.wait_all_tasks_blocked()
        first.cancel()
        await trio.testing.wait_all_tasks_blocked()
        await lock.__aexit__(None, None, None)
    assert got == ["second"]
    assert first.cancelled_caught
    assert not lock.held


async def test_a_queued_request_is_read_without_a_turn(pipe: tuple[int, int]) -> None:
    r, w = pipe
    os.write(w, b"x")
    probe = ReadinessProbe()
    with counting_turns() as turns:
        assert not await turns.took_a_turn(probe.wait_readable(r))


async def test_after_the_budget_the_wait_gives_the_scheduler_a_turn(pipe: tuple[int, int]) -> None:
    r, w = pipe
    os.write(w, b"x")
    probe = ReadinessProbe(budget=3)
    with counting_turns() as turns:
        took = [await turns.took_a_turn(probe.wait_readable(r)) for _ in range(8)]
    assert took == [False, False, False, True, False, False, False, True]


async def waited_for_a_write(probe: ReadinessProbe, r: int, w: int) -> bool:
    """Wait on `r` while another task writes to `w` once every task is blocked: whether the
    wait lasted until that write."""
    written = False

    async def write_once_all_wait() -> None:
        nonlocal written
        await trio.testing.wait_all_tasks_blocked()
        written = True
        os.write(w, b"x")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(write_once_all_wait)
        await probe.wait_readable(r)
        return written


async def test_with_nothing_queued_it_waits_until_a_request_comes(pipe: tuple[int, int]) -> None:
    r, w = pipe
    assert await waited_for_a_write(ReadinessProbe(), r, w)


async def test_a_cancelled_task_raises_even_with_a_request_queued(pipe: tuple[int, int]) -> None:
    r, w = pipe
    os.write(w, b"x")
    probe = ReadinessProbe()
    with trio.CancelScope() as scope:
        scope.cancel()
        await probe.wait_readable(r)
    assert scope.cancelled_caught


async def test_another_device_is_polled_in_place_of_the_first(pipe: tuple[int, int]) -> None:
    r, w = pipe
    probe = ReadinessProbe()
    os.write(w, b"x")
    await probe.wait_readable(r)  # the first device, registered and left readable
    other_r, other_w = os.pipe()
    try:
        assert await waited_for_a_write(probe, other_r, other_w)  # nothing queued there yet: it waits
    finally:
        os.close(other_r)
        os.close(other_w)


def test_pyfuse3_runs_on_the_facade_only_while_serving() -> None:
    assert pyfuse3.trio is trio  # type: ignore[attr-defined]
    with pytest.raises(RuntimeError), session.serving() as facade:
        assert pyfuse3.trio is facade  # type: ignore[attr-defined]
        assert isinstance(facade, LoopFacade)
        assert facade.Lock is HandoverLock
        assert facade.lowlevel.wait_readable.__self__.__class__ is ReadinessProbe
        # the rest is trio's own
        assert facade.open_nursery is trio.open_nursery
        assert facade.ClosedResourceError is trio.ClosedResourceError
        assert facade.lowlevel.current_task is trio.lowlevel.current_task
        raise RuntimeError("the loop ended with an error")
    assert pyfuse3.trio is trio  # type: ignore[attr-defined]
