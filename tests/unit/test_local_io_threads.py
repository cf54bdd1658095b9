"""Local reads that must wait for a disk: the worker threads (values and exceptions come back to
the right task, a cancelled task does not wait for its job, jobs run before the watcher starts
or after it stops), and the reads started before the hand-over."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
import trio
import trio.testing

from hdfsfuse.datanode.checksum import CHECKSUM_CRC32C, Checksum
from hdfsfuse.local.io_threads import LocalIoThreads
from hdfsfuse.local.verified_io import read_in, read_verified
from tests.page_residency import drop_pages, resident_pages, wait_until_resident


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


def test_read_in_starts_reading_the_chunks_and_their_checksums(tmp_path: Path) -> None:
    checksum = Checksum(CHECKSUM_CRC32C, 512)
    block = bytes((i * 31 + 7) % 253 for i in range(4 << 20))  # 8,192 chunks: 32 KiB of checksums
    data, sums = tmp_path / "blk", tmp_path / "blk.meta"
    data.write_bytes(block)
    sums.write_bytes(b"H" * 7 + checksum.compute(block))  # after a 7-byte header, as a meta file
    for path in (data, sums):
        drop_pages(path)
    offset, length = 3_000_000, 4096  # chunks 5859-5867: data pages 732-733, checksum page 5
    data_fd, sums_fd = os.open(data, os.O_RDONLY), os.open(sums, os.O_RDONLY)
    try:
        read_in(data_fd, 0, sums_fd, 7, checksum, len(block), offset, length)
        wait_until_resident(data, [732, 733])
        wait_until_resident(sums, [5])
        assert sum(resident_pages(data)) <= 64  # that range, not the file (readahead may round up)
        assert read_verified(data_fd, 0, sums_fd, 7, checksum, len(block), offset, length, "blk",
                             nowait=True) == block[offset : offset + length]
    finally:
        os.close(data_fd)
        os.close(sums_fd)


async def test_the_threads_exit_and_close_their_eventfd_when_the_watcher_stops() -> None:
    before = set(os.listdir("/proc/self/fd"))
    pool = LocalIoThreads()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(pool.serve)
        await trio.testing.wait_all_tasks_blocked()
        assert await pool.run(lambda: 1) == 1
        # the eventfd, and the io_uring ring with its own eventfd where the kernel allows one
        assert len(set(os.listdir("/proc/self/fd")) - before) == (3 if pool.ring.available else 1)
        nursery.cancel_scope.cancel()
    with trio.fail_after(5):
        while any(t.name.startswith("hdfsfuse-local-io-") for t in threading.enumerate()):
            await trio.sleep(0.01)
    assert set(os.listdir("/proc/self/fd")) - before == set()


