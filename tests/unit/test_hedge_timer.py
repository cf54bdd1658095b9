"""The hedge timer on trio's virtual clock: one task, hedges only for reads past their threshold."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
import trio
import trio.testing

from hdfsfuse.datanode.hedging import HedgeTimer, Race


def with_timer(body: Callable[[HedgeTimer, trio.Nursery], Awaitable[None]]) -> None:
    """Run `body` with a hedge timer running in a nursery, on a virtual clock."""

    async def main() -> None:
        timer = HedgeTimer()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(timer.run, nursery)
            await body(timer, nursery)
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_a_slow_primary_is_hedged_and_the_hedge_wins() -> None:
    started: list[float] = []

    async def hedge(race: Race) -> None:
        started.append(trio.current_time())
        await trio.sleep(0.01)
        race.won(b"from the hedge")

    async def body(timer: HedgeTimer, nursery: trio.Nursery) -> None:
        race = Race(hedge)
        t0 = trio.current_time()
        timer.arm(t0 + 0.05, race)
        with race.primary_scope:
            await trio.sleep(10)  # a primary that never answers in time
        assert race.primary_scope.cancelled_caught and race.hedge_result == b"from the hedge"
        assert started == [t0 + 0.05] and trio.current_time() == pytest.approx(t0 + 0.06)
        race.finish()

    with_timer(body)


def test_a_fast_primary_is_never_hedged_and_costs_no_task() -> None:
    started: list[Race] = []

    async def hedge(race: Race) -> None:
        started.append(race)

    async def body(timer: HedgeTimer, nursery: trio.Nursery) -> None:
        for _ in range(100):
            race = Race(hedge)
            timer.arm(trio.current_time() + 0.05, race)
            await trio.sleep(0.001)  # answered well within the threshold
            race.finish()
        await trio.sleep(1)  # every deadline passes: none of them fires
        assert started == [] and len(nursery.child_tasks) == 1  # the timer alone
        # It slept past the finished reads: a wake-up per threshold (50 ms of 100 reads), not per read.
        assert timer.wakeups <= 5

    with_timer(body)


def test_an_earlier_deadline_wakes_the_timer_and_a_failing_hedge_is_contained() -> None:
    fired: list[float] = []

    async def hedge(race: Race) -> None:
        fired.append(trio.current_time())
        raise RuntimeError("a bug in a hedge")

    async def body(timer: HedgeTimer, nursery: trio.Nursery) -> None:
        t0 = trio.current_time()
        late, early = Race(hedge), Race(hedge)
        timer.arm(t0 + 5, late)
        await trio.sleep(0)
        timer.arm(t0 + 0.05, early)
        await early.hedge_done.wait()
        assert fired == [t0 + 0.05] and isinstance(early.hedge_result, RuntimeError)
        late.finish()
        await trio.sleep(10)
        assert fired == [t0 + 0.05]  # the finished race never hedged; the timer still runs

    with_timer(body)


def test_arming_an_idle_timer_does_not_wake_it() -> None:
    async def hedge(race: Race) -> None:
        raise AssertionError("no read here is slow")

    async def body(timer: HedgeTimer, nursery: trio.Nursery) -> None:
        await trio.sleep(1)
        before = timer.wakeups
        for _ in range(10):  # a read now and then, each answered in time, the timer idle between
            race = Race(hedge)
            timer.arm(trio.current_time() + 0.05, race)
            await trio.sleep(0.001)
            race.finish()
            await trio.sleep(1)
        # One wake-up per read, at its threshold (to drop it): arming moved the sleep's deadline.
        assert timer.wakeups - before == 10

    with_timer(body)
