"""Local file reads for the trio loop through io_uring: no worker thread, no thread hop.

A cold 4 KiB read of a cached block or a local replica must wait for the disk. Handed to a worker
thread, it pays for two wake-ups besides the disk's: the worker's, and the loop's when the worker
hands the bytes back. On a virtual machine a sleeping CPU takes tens of microseconds to wake, so
the hand-over cost more than the disk (docs/performance.md has the figures). A large O_DIRECT
read of a local replica (`pread_into`, an aligned buffer) saves the hand-over and the worker's
wait for the GIL too. Here the kernel reads
into the buffers itself, and one eventfd wakes the loop:

    reader task                       reaper task (serve)                 kernel
    pread_many([(fd, n, off), ...])
      one slot per read --ring.read--------------------------------------> SQ
      ring.submit() -----------------------------------------------------> io_uring_enter
      park                                                                ... the disk ...
                                      wait_readable(eventfd) <----------- CQ: (slot, result)
      <----- reschedule(task, bufs) - ring.reap(): the batch's last read

A batch's reads run concurrently (a cache lookup's flags, checksums and data: one wait, not
three). A cancelled reader abandons its batch: its slots stay taken, and the kernel keeps
writing into buffers the ring holds, until the completions are reaped. Once the ring stops (the
client closing, or a reaper that failed, which logs it), reads raise RingClosed, an OSError, and
callers read another way. Without the C extension, or where the kernel refuses io_uring (old
kernels, `kernel.io_uring_disabled`, seccomp), `available` is False and callers use their worker
threads.
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import os
from collections.abc import Sequence

import outcome
import trio

try:
    from hdfsfuse.local._uring import Ring
except ImportError:  # built without the C extension
    Ring = None

log = logging.getLogger(__name__)

SLOTS = 64  # reads in flight at once; more wait for a slot
Read = tuple[int, int, int]  # (fd, bytes, offset)


def unavailable() -> str | None:
    """Why this process cannot read through io_uring, or None when it can."""
    if Ring is None:
        return "hdfsfuse.local._uring (the C extension) is not built"
    try:
        Ring(1).close()
    except OSError as e:
        return f"the kernel refuses io_uring: {e.strerror or e}"
    return None


async def wait_eventfd(fd: int) -> None:
    """Wait until an eventfd (non-blocking) has been written to, and clear it."""
    await trio.lowlevel.wait_readable(fd)
    try:
        os.eventfd_read(fd)
    except BlockingIOError:  # another reader cleared it first
        pass


class RingClosed(OSError):
    """The ring stopped (the client is closing, or its reaper failed): read another way."""

    def __init__(self) -> None:
        super().__init__(errno.ESHUTDOWN, "io_uring reads stopped")


@dataclasses.dataclass(eq=False, slots=True)
class _Batch:
    task: trio.lowlevel.Task | None  # None once abandoned
    results: list[int]
    remaining: int


class UringReads:
    """One ring and its reaper. `available` says whether `pread_many` and `pread_into` may be called."""

    def __init__(self, slots: int = SLOTS) -> None:
        self._slots = slots
        self._ring: Ring | None = None
        self._free: list[int] = []
        self._owner: dict[int, tuple[_Batch, int]] = {}  # slot -> (its batch, its index there)
        self._slot_freed = trio.Event()

    @property
    def available(self) -> bool:
        return self._ring is not None

    def _open(self) -> bool:
        if Ring is None:
            return False
        try:
            self._ring = Ring(self._slots)
        except OSError as e:
            log.info("io_uring unavailable (%s); local reads that wait for a disk use threads",
                     e.strerror or e)
            return False
        self._free = list(range(self._slots))
        return True

    async def serve(self) -> None:
        """Open the ring and hand completions back to their readers until cancelled; then wait
        for the reads in flight (their buffers belong to the kernel until then) and close it."""
        if not self._open():
            return
        ring = self._ring
        assert ring is not None
        try:
            while True:
                await wait_eventfd(ring.eventfd)
                self._complete(ring.reap())
        except Exception as e:  # a background task: log, never escape; reads go to threads from now on
            log.error("io_uring reads stopped: %s: %s; local reads that wait for a disk use threads",
                      type(e).__name__, e)
        finally:
            self._ring = None
            for batch, _ in self._owner.values():
                if batch.task is not None:  # its reader is being cancelled with us; wake it to see
                    task, batch.task = batch.task, None
                    trio.lowlevel.reschedule(task, outcome.Error(RingClosed()))
            self._owner.clear()
            self._slot_freed.set()
            ring.close()

    def _complete(self, done: list[tuple[int, int]]) -> None:
        for slot, result in done:
            batch, index = self._owner.pop(slot)
            self._free.append(slot)
            batch.results[index] = result
            batch.remaining -= 1
            if batch.remaining == 0 and batch.task is not None:
                trio.lowlevel.reschedule(batch.task, outcome.Value(None))
        if done:
            self._slot_freed.set()
            self._slot_freed = trio.Event()

    async def pread_many(self, reads: Sequence[Read]) -> list[bytearray]:
        """Each (fd, n, offset) read concurrently: the bytes read, each at most n (fewer at the
        end of a file). Raises OSError for a read that failed."""
        buffers = [bytearray(n) for _, n, _ in reads]
        got = await self.pread_into([(fd, buf, offset) for (fd, _, offset), buf in zip(reads, buffers, strict=True)])
        return [buf if n == len(buf) else buf[:n] for buf, n in zip(buffers, got, strict=True)]

    async def pread_into(self, reads: Sequence[tuple[int, bytearray, int]]) -> list[int]:
        """Each (fd, buffer, offset) read concurrently into its buffer (an aligned one for an
        O_DIRECT descriptor): how many bytes each read. Raises OSError for a read that failed."""
        if len(reads) > self._slots:
            raise ValueError(f"{len(reads)} reads at once, more than the ring's {self._slots} slots")
        while len(self._free) < len(reads):
            if self._ring is None:
                raise RingClosed
            await self._slot_freed.wait()
        ring = self._ring
        if ring is None:
            raise RingClosed
        batch = _Batch(trio.lowlevel.current_task(), [0] * len(reads), len(reads))

        def abandon(_: object) -> trio.lowlevel.Abort:
            batch.task = None
            return trio.lowlevel.Abort.SUCCEEDED

        try:
            for index, (fd, buffer, offset) in enumerate(reads):
                slot = self._free.pop()
                try:
                    ring.read(slot, fd, buffer, offset)
                except BaseException:
                    self._free.append(slot)
                    raise
                self._owner[slot] = (batch, index)
            while True:
                try:
                    ring.submit()
                    break
                except OSError as e:  # the kernel is short of memory for requests: the reads stay queued
                    if e.errno not in (errno.EAGAIN, errno.EBUSY, errno.EINTR):
                        raise
                    await trio.sleep(0.001)
        except BaseException:
            batch.task = None  # the reads queued complete on their own; their slots come back then
            raise
        await trio.lowlevel.wait_task_rescheduled(abandon)
        for (fd, buffer, offset), result in zip(reads, batch.results, strict=True):
            if result < 0:
                raise OSError(-result, f"reading {len(buffer)} bytes at {offset} of fd {fd}: {os.strerror(-result)}")
        return batch.results
