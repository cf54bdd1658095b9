"""Worker threads for reads of local files (the block cache, short-circuit replicas), with a cheap
way back to trio.

A local 4 KiB read that must wait for the disk costs about 60 us. `trio.to_thread.run_sync`
costs about 120 us of CPU per call on top (its thread cache, capacity limiter and entry queue),
so it doubled what a cold cached read cost. These threads take jobs from one queue and hand the
results back through one eventfd, watched by one trio task:

    reader task --put(job)--> SimpleQueue --> worker thread: outcome of job.fn(*args)
         ^                                          |
         +-- reschedule(task, outcome) <-- watcher task <-- eventfd <-- done.append(job)

Reads that wait for a disk (small ones, and large O_DIRECT ones of local replicas) skip the
threads where the kernel allows: `ring` (hdfsfuse.local.uring) reads them through io_uring, and
`serve()` runs its reaper too.

A cancelled reader abandons its job: it is not waited for, and its result is dropped when it
arrives. The pool owns no trio task itself: `serve()` is the watcher, run by the client's
nursery. Until it runs, jobs go to `trio.to_thread.run_sync` instead; jobs that finish after it
stops are handed back through trio's own entry queue, and the threads exit.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import queue
import sys
import threading
from collections.abc import Callable
from typing import Any

import outcome
import trio

from hdfsfuse.local.uring import UringReads, wait_eventfd

THREADS = 4
SWITCH_INTERVAL = 0.0005  # seconds; the interpreter's default is 0.005


def shorten_switch_interval() -> None:
    """Let a worker back in within 0.5 ms of its C call (pread, a CRC check) returning.

    A worker that wants the GIL back while the trio loop holds it waits for the loop's next
    blocking call, or for the interpreter's switch interval (5 ms by default). A large local
    read takes the GIL several times (each pread, the check, the hand-back), so those waits
    added up (docs/performance.md has the trace and the bench figures). With one thread running
    (no worker busy) the interval changes nothing. For the daemon,
    whose process this is; a library user keeps their own setting.
    """
    sys.setswitchinterval(SWITCH_INTERVAL)


@dataclasses.dataclass(slots=True, eq=False)
class _Job:
    task: trio.lowlevel.Task
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    result: outcome.Outcome[Any] | None = None
    abandoned: bool = False


class LocalIoThreads:
    """A fixed pool of threads for blocking local file reads (jobs run in arrival order)."""

    def __init__(self, threads: int = THREADS) -> None:
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._done: collections.deque[_Job] = collections.deque()
        self._wakeup = -1  # an eventfd while the threads run
        self._threads = [threading.Thread(target=self._work, name=f"hdfsfuse-local-io-{i}", daemon=True)
                         for i in range(threads)]
        self._running = 0  # threads not yet exited (the last one out closes the eventfd)
        self._running_lock = threading.Lock()
        self._serving = False
        self._token: trio.lowlevel.TrioToken | None = None
        self.ring = UringReads()  # reads that wait for a disk, with no thread (where the kernel allows)

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """fn(*args) in a worker thread: its value, or what it raised."""
        if not self._serving:
            return await trio.to_thread.run_sync(fn, *args)
        job = _Job(trio.lowlevel.current_task(), fn, args)
        self._jobs.put(job)

        def abandon(_: object) -> trio.lowlevel.Abort:
            job.abandoned = True
            return trio.lowlevel.Abort.SUCCEEDED

        return await trio.lowlevel.wait_task_rescheduled(abandon)

    async def serve(self) -> None:
        """Start the threads and the ring, and hand finished jobs back to their tasks until
        cancelled."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.ring.serve)
            await self._serve_threads()

    async def _serve_threads(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._wakeup = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._running = len(self._threads)
        for thread in self._threads:
            thread.start()
        self._serving = True
        try:
            while True:
                await wait_eventfd(self._wakeup)
                self._hand_back()
        finally:
            self._serving = False
            for _ in self._threads:
                self._jobs.put(None)
            self._hand_back()

    def _hand_back(self) -> None:
        while self._done:
            job = self._done.popleft()
            if not job.abandoned:
                assert job.result is not None
                trio.lowlevel.reschedule(job.task, job.result)

    def _work(self) -> None:
        try:
            self._serve_jobs()
        finally:
            # The last thread out closes the eventfd: none can write to it after that, so its
            # number can never be written to once reused for another file.
            with self._running_lock:
                self._running -= 1
                if self._running == 0:
                    os.close(self._wakeup)

    def _serve_jobs(self) -> None:
        while (job := self._jobs.get()) is not None:
            job.result = outcome.capture(job.fn, *job.args)
            self._done.append(job)
            if self._serving:
                os.eventfd_write(self._wakeup, 1)
                continue
            try:  # the watcher has stopped (or is stopping): hand it back through trio's own queue
                assert self._token is not None
                self._token.run_sync_soon(self._hand_back)
            except trio.RunFinishedError:
                pass
