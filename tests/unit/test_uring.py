"""Local file reads through io_uring (hdfsfuse.local.uring and its C ring, hdfsfuse.local._uring): the bytes
`os.pread` returns, concurrently, short at the end of a file, errors as OSError, cancelled readers
leaving the ring usable, and nothing left open once it stops."""

from __future__ import annotations

import errno
import os
import random
from pathlib import Path

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from hdfsfuse.local import uring
from hdfsfuse.local.uring import UringReads

UNAVAILABLE = uring.unavailable()
needs_ring = pytest.mark.skipif(UNAVAILABLE is not None, reason=str(UNAVAILABLE))


def _file(tmp_path: Path, size: int = 1 << 20, seed: int = 0) -> tuple[Path, bytes]:
    data = random.Random(seed).randbytes(size)
    path = tmp_path / "f"
    path.write_bytes(data)
    return path, data


async def _serving(nursery: trio.Nursery, slots: int = uring.SLOTS) -> UringReads:
    ring = UringReads(slots)
    nursery.start_soon(ring.serve)
    await trio.testing.wait_all_tasks_blocked()
    assert ring.available
    return ring


@needs_ring
@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(0, (1 << 20) + 100), st.integers(0, 70_000)), min_size=1, max_size=3))
def test_a_batch_reads_what_pread_reads(tmp_path_factory: pytest.TempPathFactory,
                                        reads: list[tuple[int, int]]) -> None:
    path, data = _file(tmp_path_factory.mktemp("u"))

    async def main() -> list[bytearray]:
        fd = os.open(path, os.O_RDONLY)
        try:
            async with trio.open_nursery() as nursery:
                ring = await _serving(nursery)
                got = await ring.pread_many([(fd, n, off) for off, n in reads])
                nursery.cancel_scope.cancel()
            return got
        finally:
            os.close(fd)

    got = trio.run(main)
    assert [bytes(b) for b in got] == [data[off : off + n] for off, n in reads]  # short at the end of the file


@needs_ring
async def test_many_readers_at_once_each_get_their_own_bytes(tmp_path: Path) -> None:
    path, data = _file(tmp_path, 4 << 20, seed=1)
    fd = os.open(path, os.O_RDONLY)
    rng = random.Random(2)
    wanted = [[(rng.randrange(len(data) - 8192), rng.choice([1, 512, 4096, 8192])) for _ in range(3)]
              for _ in range(40)]
    results: dict[int, list[bytes]] = {}
    try:
        async with trio.open_nursery() as nursery:
            ring = await _serving(nursery, slots=8)  # fewer slots than reads: readers wait for slots

            async def reader(i: int) -> None:
                got = await ring.pread_many([(fd, n, off) for off, n in wanted[i]])
                results[i] = [bytes(b) for b in got]

            async with trio.open_nursery() as readers:
                for i in range(len(wanted)):
                    readers.start_soon(reader, i)
            nursery.cancel_scope.cancel()
    finally:
        os.close(fd)
    assert results == {i: [data[off : off + n] for off, n in w] for i, w in enumerate(wanted)}


@needs_ring
async def test_a_failed_read_raises_oserror_and_the_ring_goes_on(tmp_path: Path) -> None:
    path, data = _file(tmp_path)
    fd = os.open(path, os.O_RDONLY)
    closed = 999_999  # no such descriptor
    try:
        async with trio.open_nursery() as nursery:
            ring = await _serving(nursery)
            with pytest.raises(OSError) as e:
                await ring.pread_many([(fd, 10, 0), (closed, 10, 0)])
            assert e.value.errno == errno.EBADF
            assert [bytes(b) for b in await ring.pread_many([(fd, 10, 5)])] == [data[5:15]]
            nursery.cancel_scope.cancel()
    finally:
        os.close(fd)


@needs_ring
async def test_a_cancelled_reader_leaves_its_slots_to_come_back(tmp_path: Path) -> None:
    path, data = _file(tmp_path)
    fd = os.open(path, os.O_RDONLY)
    r, w = os.pipe()  # a read that waits until the test writes
    try:
        async with trio.open_nursery() as nursery:
            ring = await _serving(nursery, slots=2)
            with trio.move_on_after(0.05) as scope:
                await ring.pread_many([(r, 5, 0), (fd, 4, 0)])  # a pipe: the offset is ignored
            assert scope.cancelled_caught
            os.write(w, b"hello")  # the abandoned read completes; its slot comes back
            with trio.fail_after(10):
                assert [bytes(b) for b in await ring.pread_many([(fd, 3, 1), (fd, 3, 7)])] == [data[1:4], data[7:10]]
            nursery.cancel_scope.cancel()
    finally:
        for f in (fd, r, w):
            os.close(f)


@needs_ring
async def test_a_batch_larger_than_the_ring_is_refused(tmp_path: Path) -> None:
    path, _ = _file(tmp_path)
    fd = os.open(path, os.O_RDONLY)
    try:
        async with trio.open_nursery() as nursery:
            ring = await _serving(nursery, slots=2)
            with pytest.raises(ValueError, match="more than the ring's 2 slots"):
                await ring.pread_many([(fd, 1, 0)] * 3)
            nursery.cancel_scope.cancel()
    finally:
        os.close(fd)


@needs_ring
async def test_stopping_closes_the_ring_and_its_eventfd(tmp_path: Path) -> None:
    before = set(os.listdir("/proc/self/fd"))
    ring = UringReads()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ring.serve)
        await trio.testing.wait_all_tasks_blocked()
        assert len(set(os.listdir("/proc/self/fd")) - before) == 2  # the ring and its eventfd
        nursery.cancel_scope.cancel()
    assert not ring.available
    assert set(os.listdir("/proc/self/fd")) - before == set()


async def test_without_io_uring_the_reads_are_not_offered(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(slots: int) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(uring, "Ring", refused)
    assert uring.unavailable() == "the kernel refuses io_uring: Operation not permitted"
    ring = UringReads()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ring.serve)
        await trio.testing.wait_all_tasks_blocked()
        assert not ring.available  # callers use their worker threads
        nursery.cancel_scope.cancel()
    monkeypatch.setattr(uring, "Ring", None)  # built without the C extension
    assert uring.unavailable() == "hdfsfuse.local._uring (the C extension) is not built"


@needs_ring
def test_the_c_ring_refuses_bad_arguments(tmp_path: Path) -> None:
    path, _ = _file(tmp_path)
    fd = os.open(path, os.O_RDONLY)
    ring = uring.Ring(2)
    try:
        with pytest.raises(ValueError, match="out of range"):
            ring.read(2, fd, bytearray(4), 0)
        with pytest.raises(ValueError, match="negative offset"):
            ring.read(0, fd, bytearray(4), -2)
        with pytest.raises((TypeError, BufferError)):
            ring.read(0, fd, b"read-only", 0)
        buf = bytearray(4)
        ring.read(0, fd, buf, 0)
        with pytest.raises(ValueError, match="busy"):
            ring.read(0, fd, bytearray(4), 0)
        with pytest.raises(BufferError):  # held by the kernel's read until it is reaped
            buf.extend(b"x")
        assert ring.in_flight == 1
        ring.submit()
    finally:
        ring.close()  # waits for the read in flight
        os.close(fd)
    assert ring.in_flight == 0 and ring.eventfd == -1
    buf.extend(b"x")  # released
    ring.close()  # twice is fine
    with pytest.raises(ValueError, match="closed"):
        ring.submit()
    for slots in (0, 5000):
        with pytest.raises(ValueError, match="slots"):
            uring.Ring(slots)


@needs_ring
async def test_a_failing_reaper_logs_once_and_readers_fall_back(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    path, _ = _file(tmp_path)
    fd = os.open(path, os.O_RDONLY)
    try:
        async with trio.open_nursery() as nursery:  # nothing escapes it
            ring = await _serving(nursery)
            assert ring._ring is not None

            def broken(done: list[tuple[int, int]]) -> None:
                raise RuntimeError("a bug")

            monkeypatch.setattr(ring, "_complete", broken)
            with pytest.raises(uring.RingClosed) as e:  # an OSError: the callers' fallback
                await ring.pread_many([(fd, 10, 0)])
            assert isinstance(e.value, OSError)
            assert not ring.available
            with pytest.raises(uring.RingClosed):
                await ring.pread_many([(fd, 10, 0)])
    finally:
        os.close(fd)
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "io_uring reads stopped: RuntimeError: a bug" in errors[0].getMessage()


@needs_ring
def test_closing_cancels_a_read_that_would_wait_forever() -> None:
    import threading

    r, w = os.pipe()  # nothing is ever written: the read would wait for ever
    ring = uring.Ring(2)
    ring.read(0, r, bytearray(5), 0)
    ring.submit()
    closer = threading.Thread(target=ring.close)
    closer.start()
    closer.join(10)
    try:
        assert not closer.is_alive(), "close() waited for a read that never completes"
        assert ring.in_flight == 0 and ring.eventfd == -1
    finally:
        if closer.is_alive():
            os.write(w, b"x")  # let it finish, so the test run can end
            closer.join()
        os.close(r)
        os.close(w)
