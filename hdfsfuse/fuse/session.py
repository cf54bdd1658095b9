"""pyfuse3's request loop with fewer turns of trio's scheduler per request.

pyfuse3 runs its request loop on the event-loop module it holds as `pyfuse3.trio` (its asyncio
mode swaps that module the same way). Each request cost two full scheduler turns before it was
read, even with requests already queued in /dev/fuse: the read lock's checkpoint, and the wait
for the device to be readable. `serving()` gives the loop trio with two parts changed:

- `Lock` (`HandoverLock`): taken at once when free; when held, waiters queue in order and each
  release hands it to the next.
- `lowlevel.wait_readable` (`ReadinessProbe`): when a poll that does not wait says a request is
  queued, it returns at once (a cancelled task still raises), at most `SKIP_BUDGET` times in a
  row; then it waits for real, so the loop's other tasks (reads waiting on DataNodes) get their
  turn at least that often.

Everything else is trio's own. Does no I/O beyond the poll.
"""

from __future__ import annotations

import select
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pyfuse3
import trio

SKIP_BUDGET = 8  # requests read in a row without a turn of the scheduler


class HandoverLock:
    """An async lock for one trio loop: free, it is taken without a scheduler turn; held, its
    waiters queue in order and a release hands it straight to the first of them."""

    def __init__(self) -> None:
        self._held = False
        self._waiting = trio.lowlevel.ParkingLot()

    @property
    def held(self) -> bool:
        return self._held

    async def __aenter__(self) -> None:
        if self._held:
            await self._waiting.park()  # woken by a release, already holding it
        else:
            self._held = True

    async def __aexit__(self, *exc_info: object) -> None:
        if self._waiting:
            self._waiting.unpark()
        else:
            self._held = False


class ReadinessProbe:
    """`wait_readable` for the FUSE device: returns at once while requests are queued, within
    the budget; otherwise trio's own wait."""

    def __init__(self, budget: int = SKIP_BUDGET) -> None:
        self.budget = budget
        self._poll = select.poll()
        self._fd: int | None = None
        self._skipped = 0

    async def wait_readable(self, fd: int) -> None:
        if self._skipped < self.budget and self._queued(fd):
            self._skipped += 1
            await trio.lowlevel.checkpoint_if_cancelled()
            return
        self._skipped = 0
        await trio.lowlevel.wait_readable(fd)

    def _queued(self, fd: int) -> bool:
        if fd != self._fd:
            if self._fd is not None:
                self._poll.unregister(self._fd)
            self._poll.register(fd, select.POLLIN)
            self._fd = fd
        events = self._poll.poll(0)
        return bool(events) and events[0][1] == select.POLLIN  # an error or hang-up: trio's wait reports it


class _Lowlevel:
    def __init__(self, probe: ReadinessProbe) -> None:
        self.wait_readable = probe.wait_readable

    def __getattr__(self, name: str) -> Any:
        return getattr(trio.lowlevel, name)


class LoopFacade:
    """trio as pyfuse3's request loop sees it, with the lock and the readiness wait above."""

    Lock = HandoverLock

    def __init__(self) -> None:
        self.lowlevel = _Lowlevel(ReadinessProbe())

    def __getattr__(self, name: str) -> Any:
        return getattr(trio, name)


@contextmanager
def serving() -> Iterator[LoopFacade]:
    """Run pyfuse3's loop (`pyfuse3.main`) on the facade inside this block; trio after it."""
    facade = LoopFacade()
    pyfuse3.trio = facade  # type: ignore[attr-defined]  # pyfuse3's own switch of loop module
    try:
        yield facade
    finally:
        pyfuse3.trio = trio  # type: ignore[attr-defined]
