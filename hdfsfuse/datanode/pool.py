"""Idle DataNode connections, kept for less than the DataNode's 4 s keepalive. Does I/O.

A socket goes back only after a complete, verified read. A socket not reused within
STATUS_DELAY / 2 to STATUS_DELAY (a reader went quiet) sends its kept read status alone
(`ConnectionPool.flush_forever`), and so does one being closed; the DataNode's counters (it counts
BytesRead once it has the status) lag a read by at most STATUS_DELAY.
"""

from __future__ import annotations

import collections
import logging

import trio

from hdfsfuse.datanode.connection import STATUS_DELAY, DnConnection

log = logging.getLogger(__name__)


class ConnectionPool:
    """Idle DataNode connections keyed by "host:port"; expire before the DataNode's keepalive."""

    def __init__(self, *, idle_seconds: float = 3.0, capacity: int = 64) -> None:
        self.idle_seconds = idle_seconds
        self.capacity = capacity
        self._idle: dict[str, collections.deque[tuple[float, DnConnection]]] = {}
        self._count = 0
        # Sockets given back with a kept status, oldest first: (when given, socket, its exchanges then).
        self._statuses: collections.deque[tuple[float, DnConnection, int]] = collections.deque()
        self._status_wakeup = trio.Event()

    def __len__(self) -> int:
        return self._count

    def take(self, address: str) -> DnConnection | None:
        """A fresh-enough idle connection to `address`, or None."""
        conns = self._idle.get(address)
        now = trio.current_time()
        while conns:
            stamp, conn = conns.pop()  # newest first
            self._count -= 1
            if now - stamp < self.idle_seconds:
                return conn
            conn.close()
        return None

    def give(self, address: str, conn: DnConnection) -> None:
        self._expire()
        if self._count >= self.capacity:
            oldest = min((q for q in self._idle.values() if q), key=lambda q: q[0][0])
            oldest.popleft()[1].close()
            self._count -= 1
        now = trio.current_time()
        self._idle.setdefault(address, collections.deque()).append((now, conn))
        self._count += 1
        if conn.pending:
            if not self._statuses:
                self._status_wakeup.set()
            self._statuses.append((now, conn, conn.exchanges))

    async def flush_forever(self) -> None:
        """Send the statuses of sockets not reused within STATUS_DELAY.

        A status goes out between STATUS_DELAY / 2 and STATUS_DELAY after its socket came back:
        each wake-up sends all of those, so the task wakes at most once per STATUS_DELAY / 2
        while reads go on, not once per read.
        """
        statuses = self._statuses
        while True:
            if not statuses:
                self._status_wakeup = trio.Event()
                await self._status_wakeup.wait()
                continue
            await trio.sleep_until(statuses[0][0] + STATUS_DELAY)
            horizon = trio.current_time() - STATUS_DELAY / 2
            while statuses and statuses[0][0] <= horizon:
                _, conn, exchanges = statuses.popleft()
                if conn.exchanges == exchanges and conn.pending:
                    conn.flush_status()  # idle since it was given back: no request took the status along

    async def reap_forever(self) -> None:
        """Close idle connections as they expire (the DataNode drops them after its keepalive)."""
        while True:
            await trio.sleep(self.idle_seconds / 2)
            try:
                self._expire()
            except Exception as e:  # a background task: log, never escape
                log.error("closing idle DataNode connections failed: %s: %s", type(e).__name__, e)

    def _expire(self) -> None:
        now = trio.current_time()
        for conns in self._idle.values():
            while conns and now - conns[0][0] >= self.idle_seconds:
                conns.popleft()[1].close()
                self._count -= 1

    def close(self) -> None:
        for conns in self._idle.values():
            for _, conn in conns:
                conn.close()
        self._idle.clear()
        self._statuses.clear()
        self._count = 0
