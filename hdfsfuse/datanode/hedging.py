"""Hedged reads without a task per read. Does I/O (trio).

The first replica is read inline, in the caller's task. One timer task serves the whole client:
when a read has not answered within its threshold, the timer starts a second read of the same
bytes from the next replica. The first answer wins; the other read is cancelled, and its
connection closed (never pooled half-read).

    caller:  arm(race) ── read replica A inline ───────────────X (cancelled: B won) ── return B's bytes
    timer:         ... threshold ... start hedge ── read replica B ── done: cancel A's scope

Arming is a heap push (and, when it is the earliest, a move of the timer's sleep deadline), so a
read that answers within the threshold (nearly every read) costs no task, nursery, channel or
wake-up. `hdfsfuse.client.replicated` drives a `Race`.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
from collections.abc import Awaitable, Callable

import trio

log = logging.getLogger(__name__)


class Race:
    """One read that may be hedged: the inline primary's scope and the hedge's state."""

    __slots__ = ("finished", "hedge", "hedge_done", "hedge_result", "hedge_scope", "hedged", "primary_scope")

    def __init__(self, hedge: Callable[[Race], Awaitable[None]]) -> None:
        self.hedge = hedge  # started by the timer, in the client's nursery
        self.primary_scope = trio.CancelScope()
        self.hedge_scope = trio.CancelScope()
        self.hedge_done = trio.Event()
        self.hedge_result: object = None  # bytes, an exception, or None (cancelled or nothing to ask)
        self.hedged = False  # the timer fired: a hedge runs (or ran)
        self.finished = False  # the caller is done with this read: never start a hedge now

    def won(self, data: object) -> None:
        """The hedge answered: keep its bytes and stop the primary (if it is still reading)."""
        self.hedge_result = data
        if not self.finished:
            self.primary_scope.cancel()

    def finish(self) -> None:
        """The caller is done: stop a hedge that is still reading."""
        self.finished = True
        if self.hedged:  # else none can start now that `finished` is set: nothing to cancel (a cancel costs µs)
            self.hedge_scope.cancel()


class HedgeTimer:
    """Starts hedges for races whose threshold passed: one task for every read of a client."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Race]] = []
        self._order = itertools.count()
        self._sleep = trio.CancelScope()  # the timer's sleep: it wakes at this scope's deadline
        self._next = math.inf
        self.wakeups = 0  # how often the timer task ran: about once per threshold, not once per read

    def arm(self, deadline: float, race: Race) -> None:
        heapq.heappush(self._heap, (deadline, next(self._order), race))
        if deadline < self._next:  # an earlier wake-up: moved, without running the timer now
            self._next = self._sleep.deadline = deadline

    async def run(self, nursery: trio.Nursery) -> None:
        heap = self._heap
        while True:
            self.wakeups += 1
            now = trio.current_time()
            # Races that finished are dropped as they come to the top, so the timer sleeps until
            # the next read still running passes its threshold: one wake-up per threshold while
            # reads answer in time, not one per read.
            while heap and (heap[0][2].finished or heap[0][0] <= now):
                _, _, race = heapq.heappop(heap)
                if not race.finished and not race.hedged:
                    race.hedged = True
                    nursery.start_soon(self._hedge, race)
            self._next = heap[0][0] if heap else math.inf
            with trio.CancelScope(deadline=self._next) as self._sleep:
                await trio.sleep_forever()

    @staticmethod
    async def _hedge(race: Race) -> None:
        try:
            await race.hedge(race)
        except Exception as e:  # a background task: a bug fails this read only, never the client
            log.error("hedged read failed unexpectedly: %s: %s", type(e).__name__, e)
            race.hedge_result = e
        finally:
            race.hedge_done.set()
