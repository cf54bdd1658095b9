"""The local-I/O worker threads: values and exceptions come back to the right task, a cancelled
task does not wait for its job, and jobs run before the watcher starts or after it stops."""

from __future__ import annotations

import threading

import pytest
import trio
import trio.testing

from hdfsfuse.local_io_threads import LocalIoThreads


async def test_results_and_exceptions_reach_their_own_tasks() -> None:
    pool = LocalIoThreads()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(pool.serve)
        await trio.testing.wait_all_tasks_blocked()
        got: dict[int, int] = {}

        async def one(i: int) -> None:
            got[i] = await pool.run(lambda: (i * i, threading.current_thread().name)[0])

        async with trio.open_nursery() as readers:
            for i in range(200):
                readers.start_soon(one, i)
        assert got == {i: i * i for i in range(200)}
        with pytest.raises(ValueError, match="invalid literal"):
            await pool.run(int, "x")
        assert (await pool.run(threading.current_thread)).name.startswith("hdfsfuse-local-io-")
        nursery.cancel_scope.cancel()


async def test_a_cancelled_task_abandons_its_job() -> None:
    pool = LocalIoThreads(threads=1)
    release = threading.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(pool.serve)
        await trio.testing.wait_all_tasks_blocked()
        safety_net = threading.Timer(5, release.set)  # (else a task that waited for its job hangs)
        safety_net.start()
        with trio.move_on_after(0.05) as scope:
            await pool.run(release.wait)
        assert scope.cancelled_caught  # cancelled at once, not after the job ended
        release.set()
        safety_net.cancel()
        assert await pool.run(lambda: 7) == 7  # the thread finished the abandoned job, then this one
        nursery.cancel_scope.cancel()


async def test_jobs_run_before_the_watcher_starts_and_after_it_stops() -> None:
    pool = LocalIoThreads(threads=1)
    assert await pool.run(lambda: "before") == "before"  # in trio's own threads
    release = threading.Event()
    result: list[str] = []
    async with trio.open_nursery() as outer:
        async with trio.open_nursery() as watcher:
            watcher.start_soon(pool.serve)
            await trio.testing.wait_all_tasks_blocked()

            async def waiting() -> None:
                result.append(await pool.run(lambda: (release.wait(), "in flight")[1]))

            outer.start_soon(waiting)
            await trio.testing.wait_all_tasks_blocked()
            watcher.cancel_scope.cancel()  # the watcher stops while the job runs
        release.set()
        with trio.fail_after(5):
            while not result:
                await trio.sleep(0.01)
    assert result == ["in flight"]
    assert await pool.run(lambda: "after") == "after"
