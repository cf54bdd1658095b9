"""When the block cache may answer for an open file's block, on trio's virtual clock: fresh
descriptions answer with no call, old ones are renewed once for every reader, a renewal the
file's pinned view refuses turns the cache off for that file, and a slow or failing NameNode
sends reads to the DataNodes instead of holding them."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import pytest
import trio
import trio.testing

from hdfsfuse.errors import BlockUnavailable, FileChanged
from hdfsfuse.local.blockcache.freshness import CacheFreshness

MAX_AGE, WAIT = 1.0, 0.5


def on_virtual_clock(body: Callable[[CacheFreshness, trio.Nursery], Awaitable[None]]) -> None:
    async def main() -> None:
        freshness = CacheFreshness("/f")
        async with trio.open_nursery() as nursery:
            await body(freshness, nursery)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


class Renewer:
    """A stand-in for the client's getBlockLocations: describes blocks after `delay`, or raises."""

    def __init__(self, freshness: CacheFreshness, *, delay: float = 0.01, starts: tuple[int, ...] | None = (0,),
                 error: Exception | None = None) -> None:
        self.freshness, self.delay, self.starts, self.error = freshness, delay, starts, error
        self.calls: list[int] = []

    async def __call__(self, start: int) -> None:
        self.calls.append(start)
        await trio.sleep(self.delay)
        if self.error is not None:
            raise self.error
        self.freshness.note((start,) if self.starts is None else self.starts, trio.current_time())


def test_a_fresh_description_answers_and_an_old_one_does_not() -> None:
    f = CacheFreshness("/f")
    f.note([0, 128], now=10.0)
    assert f.current(0, 10.9, MAX_AGE)
    assert f.current(128, 10.9, MAX_AGE)
    assert not f.current(0, 11.0, MAX_AGE)  # exactly max_age old: renewed first
    assert not f.current(256, 10.0, MAX_AGE)  # never described
    f.refused = True
    assert not f.current(0, 10.0, MAX_AGE)


def test_an_old_description_is_renewed_once_for_every_reader() -> None:
    async def body(f: CacheFreshness, nursery: trio.Nursery) -> None:
        renew = Renewer(f)
        f.note([0], trio.current_time())
        assert await f.renewed(0, renew, nursery, max_age=MAX_AGE, wait=WAIT)
        assert renew.calls == []  # fresh: no NameNode call
        await trio.sleep(MAX_AGE)
        answers: list[bool] = []

        async def reader() -> None:
            answers.append(await f.renewed(0, renew, nursery, max_age=MAX_AGE, wait=WAIT))

        async with trio.open_nursery() as readers:
            for _ in range(5):
                readers.start_soon(reader)
        assert answers == [True] * 5
        assert renew.calls == [0]  # one renewal, shared
        assert f.current(0, trio.current_time(), MAX_AGE)

    on_virtual_clock(body)


def test_a_renewal_that_describes_other_blocks_leaves_this_one_to_the_datanodes() -> None:
    async def body(f: CacheFreshness, nursery: trio.Nursery) -> None:
        renew = Renewer(f, starts=(512,))  # the file moved on: no block starts at 0 any more
        assert not await f.renewed(0, renew, nursery, max_age=MAX_AGE, wait=WAIT)
        assert renew.calls == [0]
        assert f.current(512, trio.current_time(), MAX_AGE)

    on_virtual_clock(body)


def test_a_reader_whose_block_another_renewal_missed_renews_it_itself() -> None:
    async def body(f: CacheFreshness, nursery: trio.Nursery) -> None:
        renew = Renewer(f, starts=None)  # each renewal describes only the block it was asked for
        answers: dict[int, bool] = {}

        async def reader(start: int) -> None:
            answers[start] = await f.renewed(start, renew, nursery, max_age=MAX_AGE, wait=WAIT)

        async with trio.open_nursery() as readers:
            readers.start_soon(reader, 0)
            await trio.sleep(0.001)  # block 0's renewal is in flight
            readers.start_soon(reader, 512)
        assert answers == {0: True, 512: True}
        assert renew.calls == [0, 512]

    on_virtual_clock(body)


def test_a_changed_file_turns_the_cache_off_for_good(caplog: pytest.LogCaptureFixture) -> None:
    async def body(f: CacheFreshness, nursery: trio.Nursery) -> None:
        renew = Renewer(f, error=FileChanged("/f was truncated since it was opened"))
        with caplog.at_level(logging.INFO, logger="hdfsfuse.local.blockcache.freshness"):
            assert not await f.renewed(0, renew, nursery, max_age=MAX_AGE, wait=WAIT)
        assert f.refused
        f.note([0], trio.current_time())  # a later description does not bring it back
        assert not await f.renewed(0, renew, nursery, max_age=MAX_AGE, wait=WAIT)
        assert renew.calls == [0]

    on_virtual_clock(body)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "truncated since it was opened" in lines[0], lines


def test_a_slow_namenode_holds_only_the_reads_that_came_within_the_wait() -> None:
    async def body(f: CacheFreshness, nursery: trio.Nursery) -> None:
        renew = Renewer(f, delay=10 * WAIT)
        t0 = trio.current_time()
        ended: list[float] = []

        async def later_reader() -> None:
            await trio.sleep(WAIT / 2)
            assert not await f.renewed(0, renew, nursery, max_age=MAX_AGE, wait=WAIT)
            ended.append(trio.current_time() - t0)

        nursery.start_soon(later_reader)
        assert not await f.renewed(0, renew, nursery, max_age=MAX_AGE, wait=WAIT)
        assert trio.current_time() - t0 == pytest.approx(WAIT)
        await trio.sleep(0)
        assert ended == [pytest.approx(WAIT)]  # it waited the rest of the same deadline, not a whole wait
        await trio.sleep(WAIT / 10)
        t1 = trio.current_time()
        assert not await f.renewed(0, renew, nursery, max_age=MAX_AGE, wait=WAIT)  # overdue: no wait at all
        assert trio.current_time() == t1
        assert renew.calls == [0]
        await trio.sleep(10 * WAIT)  # the renewal lands at last: the cache answers again
        assert await f.renewed(0, renew, nursery, max_age=MAX_AGE, wait=WAIT)
        assert renew.calls == [0]

    on_virtual_clock(body)


def test_a_failing_namenode_is_asked_again_only_after_max_age(caplog: pytest.LogCaptureFixture) -> None:
    async def body(f: CacheFreshness, nursery: trio.Nursery) -> None:
        renew = Renewer(f, error=BlockUnavailable("namenode unreachable"))
        with caplog.at_level(logging.WARNING, logger="hdfsfuse.local.blockcache.freshness"):
            assert not await f.renewed(0, renew, nursery, max_age=MAX_AGE, wait=WAIT)
            assert not await f.renewed(0, renew, nursery, max_age=MAX_AGE, wait=WAIT)
            assert renew.calls == [0]  # no retry within max_age
            await trio.sleep(MAX_AGE + 0.01)
            assert not await f.renewed(0, renew, nursery, max_age=MAX_AGE, wait=WAIT)
            assert renew.calls == [0, 0]
            assert not f.refused  # an unreachable NameNode says nothing about the file
            renew.error = None
            await trio.sleep(MAX_AGE + 0.01)
            assert await f.renewed(0, renew, nursery, max_age=MAX_AGE, wait=WAIT)

    on_virtual_clock(body)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "namenode unreachable" in warnings[0], warnings
