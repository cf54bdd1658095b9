"""Whether the block cache may answer for an open file's block: how fresh its description is.

A finalized block's bytes are fixed by (block pool, block id, generation stamp), so the cache is
keyed by them. An open file, though, knows each block's stamp as the NameNode last described it,
and that can go out of date under it. A truncate cuts the tail off the file's last block (and
drops the blocks after it), and an append after that writes new bytes there, under the same
block id with a new stamp. A DataNode asked for the old stamp serves its current replica, so a
read without the cache sees the change. The cache, asked by the stamp the open file holds, would
serve the bytes as they were.

So the cache answers for a block only while the NameNode described it less than `max_age`
seconds ago:

    read of block B, description older than max_age
      -> renew: one getBlockLocations for B's window (shared by every reader of the file,
         run in the client's nursery), waited for at most `wait`
           answered: B's stamp is current again, and the cache answers (a new stamp: a miss)
           refused (the file was truncated, replaced or deleted under this open file):
              the cache stops answering for it; it reads as it would without a cache
           the NameNode is slower than `wait`: this read goes to the DataNodes, which
              are current by construction; so do the reads that come while the renewal is
              overdue, with no wait of their own
           failed (the NameNode unreachable): the same, and no new renewal for `max_age`

Only replicated files need this: HDFS refuses to truncate an erasure-coded file, and appends to
one start a new block group, so a striped group's internal blocks never change under their stamp.
Pure bookkeeping plus that one wait; `hdfsfuse.client.client` supplies the renewal.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Iterable

import trio

from hdfsfuse.errors import FileChanged

log = logging.getLogger(__name__)


class CacheFreshness:
    """One open file's block descriptions: when the NameNode last gave each, and whether the
    cache may still answer for the file at all."""

    __slots__ = ("_failing", "_renewal", "_renewal_for", "_renewal_started", "_retry_at", "described", "refused",
                 "what")

    def __init__(self, what: str) -> None:
        self.what = what
        self.described: dict[int, float] = {}  # block start (file offset) -> trio time of its description
        self.refused = False  # a renewal found the file changed under this open file
        self._renewal: trio.Event | None = None
        self._renewal_started = 0.0
        self._renewal_for = 0  # the block start the renewal in flight was started for
        self._retry_at = -math.inf  # after a failed renewal, none before this time
        self._failing = False  # the last renewal failed (logged once until one succeeds)

    def note(self, starts: Iterable[int], now: float) -> None:
        """The NameNode has just described the blocks at these file offsets."""
        for start in starts:
            self.described[start] = now

    def current(self, start: int, now: float, max_age: float) -> bool:
        """The cache may answer for the block at `start` now, with no NameNode call."""
        return not self.refused and now - self.described.get(start, -math.inf) < max_age

    async def renewed(self, start: int, renew: Callable[[int], Awaitable[object]], nursery: trio.Nursery, *,
                      max_age: float, wait: float) -> bool:
        """Whether the cache may answer for the block at `start`, after renewing its description
        if it is too old (waiting `wait` at most). False: read it from the DataNodes.

        A read joins the renewal in flight. If that one was for another block and did not
        describe this one (it fetched another window), the read starts one of its own, once."""
        arrived = trio.current_time()
        own = False
        while True:
            now = trio.current_time()
            if self.current(start, now, max_age):
                return True
            if self.refused or own:
                return False
            renewal = self._renewal
            if renewal is None:
                if now < self._retry_at:
                    return False
                renewal = self._renewal = trio.Event()
                self._renewal_started, self._renewal_for = now, start
                nursery.start_soon(self._renew, start, renew, renewal, max_age)
            own = self._renewal_for == start
            # Every read waits for the renewal's deadline, and none longer than `wait` in all.
            remaining = wait - (now - min(self._renewal_started, arrived))
            if remaining <= 0:
                return False  # overdue: the NameNode is slow, and reads stop waiting for it
            with trio.move_on_after(remaining):
                await renewal.wait()

    async def _renew(self, start: int, renew: Callable[[int], Awaitable[object]], done: trio.Event,
                     max_age: float) -> None:
        """A background task: whatever the renewal raises ends here (logged once in a row)."""
        try:
            await renew(start)
            self._failing = False
        except FileChanged as e:
            self.refused = True
            log.info("%s: the block cache no longer answers for this open file (%s); it reads from the DataNodes",
                     self.what, e)
        except Exception as e:
            self._retry_at = trio.current_time() + max_age
            if not self._failing:
                log.warning("%s: could not renew the description of the block at offset %d (%s: %s); "
                            "reads the cache would answer go to the DataNodes meanwhile",
                            self.what, start, type(e).__name__, e)
            self._failing = True
        finally:
            self._renewal = None
            done.set()
