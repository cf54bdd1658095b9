"""The fsspec loop's call queue (`hdfsfuse.fsspec.portal.CallQueue`): calls from other threads
run on a real trio loop in a thread of its own, overlap, return their own results and
exceptions, and are never left waiting when the loop stops."""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Iterator

import pytest
import trio

from hdfsfuse.fsspec.portal import CallQueue


class Loop:
    """A trio loop in a background thread serving one CallQueue, as the filesystem's portal does."""

    def __init__(self) -> None:
        self.calls = CallQueue()
        self.token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        started = threading.Event()

        async def main() -> None:
            async with trio.open_nursery() as nursery:
                self.token, self._stop = trio.lowlevel.current_trio_token(), trio.Event()
                nursery.start_soon(self.calls.serve, nursery)
                started.set()
                await self._stop.wait()
                nursery.cancel_scope.cancel()

        def run() -> None:
            try:
                trio.run(main)
            finally:
                self.calls.refuse()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        assert started.wait(10)

    def stop(self) -> None:
        assert self._stop is not None
        trio.from_thread.run_sync(self._stop.set, trio_token=self.token)
        self.thread.join(10)
        assert not self.thread.is_alive()


@pytest.fixture
def loop() -> Iterator[Loop]:
    served = Loop()
    yield served
    if served.thread.is_alive():
        served.stop()


def test_calls_from_several_threads_overlap_and_each_gets_its_own_result(loop: Loop) -> None:
    callers = 4
    arrived = 0
    all_in = trio.Event()  # set only when every call is running at once

    async def meet(i: int) -> int:
        nonlocal arrived
        arrived += 1
        if arrived == callers:
            all_in.set()
        with trio.fail_after(10):
            await all_in.wait()
        return i * i

    with concurrent.futures.ThreadPoolExecutor(callers) as pool:
        results = list(pool.map(lambda i: loop.calls.call(meet, i), range(callers)))
    assert results == [i * i for i in range(callers)]


def test_exceptions_reach_the_caller_and_futures_complete(loop: Loop) -> None:
    async def fail(message: str) -> None:
        await trio.lowlevel.checkpoint()
        raise FileNotFoundError(message)

    async def ran_on_the_loop() -> bool:
        await trio.sleep(0.01)
        return threading.current_thread() is loop.thread

    with pytest.raises(FileNotFoundError, match="no such file"):
        loop.calls.call(fail, "no such file")
    assert loop.calls.call(ran_on_the_loop)
    assert loop.calls.submit(ran_on_the_loop).result(10)
    with pytest.raises(FileNotFoundError):
        loop.calls.submit(fail, "gone").result(10)


def test_calls_running_when_the_loop_stops_fail_and_later_calls_are_refused(loop: Loop) -> None:
    running = threading.Semaphore(0)

    async def forever() -> None:
        running.release()
        await trio.sleep_forever()

    outcome: list[BaseException] = []

    def caller() -> None:
        try:
            loop.calls.call(forever)
        except BaseException as e:
            outcome.append(e)

    # The first call runs in the queue's own task; the second arrives while it runs there.
    waiting = [threading.Thread(target=caller) for _ in range(2)]
    for thread in waiting:
        thread.start()
        assert running.acquire(timeout=10)
    loop.stop()
    for thread in waiting:
        thread.join(10)
        assert not thread.is_alive()  # told, not left waiting
    assert len(outcome) == 2 and all(isinstance(e, trio.RunFinishedError) for e in outcome)
    with pytest.raises(trio.RunFinishedError, match="closed"):
        loop.calls.call(trio.sleep, 0)
    with pytest.raises(trio.RunFinishedError):
        loop.calls.submit(trio.sleep, 0)


def test_a_call_the_loop_never_started_fails_when_it_stops() -> None:
    calls = CallQueue()  # no loop serves it
    future = calls.submit(trio.sleep, 0)
    assert not future.done()
    calls.refuse()
    with pytest.raises(trio.RunFinishedError, match="before the call ran"):
        future.result(10)
    calls.refuse()  # twice is harmless
