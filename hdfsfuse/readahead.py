"""Per-open-file readahead decisions and the global readahead memory budget. Pure code, no I/O.

Random reads are exact: the planner asks for nothing beyond the read. A run of sequential
reads grows a window (initial size, doubling up to `max_window`) that the mount prefetches in
the background just past the current read, so sequential reads pipeline. A seek resets it.

    reads:     [r1][r2][r3]
    frontier:              |<- prefetched window ->|
    next prefetch starts when less than half a window remains ahead of the reader.
"""

from __future__ import annotations

from dataclasses import dataclass

KiB = 1024


@dataclass(frozen=True, slots=True)
class Decision:
    offset: int
    length: int  # the read, clamped at EOF (0 at or past EOF)
    prefetch: tuple[int, int] | None  # (offset, length) to fetch in the background, if any
    sequential: bool


class ReadaheadPlanner:
    """Tracks one open file's access pattern."""

    def __init__(self, *, initial_window: int = 128 * KiB, max_window: int = 4096 * KiB) -> None:
        self.initial_window = min(initial_window, max_window)
        self.max_window = max_window
        self.window = 0
        self.last_end: int | None = None
        self.frontier = 0  # end of what has been prefetched so far

    def reset(self) -> None:
        self.window = 0
        self.last_end = None
        self.frontier = 0

    def plan(self, offset: int, size: int, file_length: int) -> Decision:
        length = max(0, min(size, file_length - offset))
        end = offset + length
        sequential = self.last_end is not None and (
            offset == self.last_end or (self.window > 0 and self.last_end <= offset < self.frontier)
        )
        prefetch = None
        if length == 0:
            return Decision(offset, 0, None, sequential)
        if not sequential:
            self.window = 0
            self.frontier = end
        elif self.max_window > 0:
            self.window = self.initial_window if self.window == 0 else min(self.window * 2, self.max_window)
            start = max(self.frontier, end)
            if start - end < self.window // 2 and start < file_length:
                stop = min(file_length, end + self.window)
                if stop > start:
                    prefetch = (start, stop - start)
                    self.frontier = stop
        self.last_end = max(end, self.last_end or 0) if sequential else end
        return Decision(offset, length, prefetch, sequential)


class ReadaheadBudget:
    """The global cap on bytes held by readahead buffers of every open file."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0

    def try_take(self, n: int) -> bool:
        if self.used + n > self.capacity:
            return False
        self.used += n
        return True

    def give_back(self, n: int) -> None:
        self.used -= n
        if self.used < 0:
            raise AssertionError("readahead budget released more than it took")
