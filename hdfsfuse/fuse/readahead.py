"""Per-open-file readahead decisions and the global readahead memory budget. Pure code, no I/O.

Random reads are exact: the planner asks for nothing beyond the read. A long sequential run
grows a window (up to `max_window`) that the mount prefetches in the background just past the
current read, so sequential reads pipeline. A seek starts a new run.

    reads:     [r1][r2][r3] ... (run >= trigger)
    frontier:                   |<- prefetched window ->|
    the next prefetch starts when less than half a window remains ahead of the reader.
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
    """Tracks one open file's access pattern.

    A read near the current stream (from the run's start up to `slack` past what was read or
    prefetched; the kernel may deliver its own readahead requests out of order) continues the
    run; anything else is a seek and starts a new run. Readahead starts only once a run has
    read `trigger` bytes, so range reads (a 1 MiB column chunk, say) stay exact, and its window
    is the run length so far, from `initial_window` up to `max_window`: the bytes a prefetch
    can waste are bounded by the bytes the run already used.
    """

    def __init__(self, *, initial_window: int = 128 * KiB, max_window: int = 4096 * KiB,
                 trigger: int = 4096 * KiB, slack: int = 1024 * KiB) -> None:
        self.initial_window = min(initial_window, max_window)
        self.max_window = max_window
        self.trigger = trigger
        self.slack = slack
        self.run_start = 0
        self.last_end: int | None = None  # furthest byte read in this run
        self.frontier = 0  # end of what has been prefetched in this run
        self.window = 0

    def plan(self, offset: int, size: int, file_length: int) -> Decision:
        length = max(0, min(size, file_length - offset))
        end = offset + length
        if length == 0:
            return Decision(offset, 0, None, False)
        near = self.last_end is not None and self.run_start <= offset <= max(self.last_end, self.frontier) + self.slack
        if not near:
            self.run_start = offset
            self.last_end = end
            self.frontier = end
            self.window = 0
            return Decision(offset, length, None, False)
        assert self.last_end is not None
        self.last_end = max(self.last_end, end)
        run = self.last_end - self.run_start
        if self.max_window <= 0 or run < self.trigger:
            return Decision(offset, length, None, True)
        self.window = min(self.max_window, max(self.initial_window, run))
        start = max(self.frontier, end)
        prefetch = None
        if start - end < self.window // 2 and start < file_length:
            stop = min(file_length, end + self.window)
            if stop > start:
                prefetch = (start, stop - start)
                self.frontier = stop
        return Decision(offset, length, prefetch, True)


PIECE = 8192 * KiB


def prefetch_pieces(offset: int, length: int, piece: int = PIECE) -> list[tuple[int, int]]:
    """A replicated file's prefetch as (offset, length) reads that run concurrently: cut at
    file offsets that are multiples of `piece`, so the kernel's 1 MiB readahead requests each
    fall inside one of them (no join).

    Each read is answered on its own (a local replica's pread in its own worker thread, a
    DataNode's READ_BLOCK on its own pooled connection), so a full window (the 16 MiB default
    cap) is two or three pieces in flight while the reader consumes what came before. A READ_BLOCK has
    a fixed cost in the DataNode and the daemon (the request, its first packet from a cold
    disk), and each read in flight at once holds a connection: a new one to a DataNode that
    wants SASL pays a handshake (a DIGEST-MD5 exchange, and AES keys under encryption: about
    4 ms of the DataNode's CPU and 1 ms of the daemon's), and pooled ones last only the
    DataNode's 4 s keepalive, so a sequential read after a pause opens them all again.

    The piece size is measured in docs/performance.md (readahead pieces).
    """
    out = []
    end = offset + length
    while offset < end:
        stop = min(end, (offset // piece + 1) * piece)
        out.append((offset, stop - offset))
        offset = stop
    return out


def max_window(readahead_max: int, data_units: int, budget: int) -> int:
    """A file's readahead cap: `readahead_max`, times the data units an erasure-coded file's
    reads fan out over (each unit's DataNode then gets as long a read as a replicated file's
    one DataNode), never more than the whole budget. 0 stays 0 (readahead off).
    """
    return min(readahead_max * max(1, data_units), budget)


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
