"""Which replica to read, and when to ask a second one. Pure bookkeeping: the caller passes the clock.

- **Order.** The NameNode's order (nearest first), except that DataNodes that refused a
  connection recently go last (a short, global penalty), and a DataNode whose recent latency
  is far above the best one's (4x, and over 20 ms) goes after the others for 30 s. Read
  failures of one block do not penalise a DataNode for other blocks: the caller keeps those
  per block.
- **Latency.** Every successful read updates its DataNode's moving average, in seconds per read
  plus seconds per byte, so a threshold can be scaled to a read's size.
- **Hedging.** `hedge_after(n)` is how long to wait for the first replica before asking the
  next one for the same bytes: a fixed `-o hedge_after=MS`, or (the default) a multiple of the
  best DataNode's expected time for `n` bytes, never below a floor. None turns hedging off.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TypeVar

R = TypeVar("R")

SLOW_FACTOR = 4.0  # a DataNode this many times slower than the best (and over SLOW_FLOOR)...
SLOW_FLOOR = 0.020  # seconds: ...so one pause of a healthy DataNode does not demote it...
SLOW_MEMORY = 30.0  # ...is read after the others for this many seconds after its last measured read
HEDGE_FACTOR = 5.0  # the adaptive threshold, as a multiple of the best expected time
HEDGE_FLOOR = 0.050  # seconds: never hedge earlier (a busy DataNode JVM pauses for tens of ms)
HEDGE_DEFAULT = 0.5  # seconds: the threshold before any latency is known
EWMA_WEIGHT = 0.2
SMALL_READ = 65536  # reads up to this size are timed per read, larger ones per byte


@dataclasses.dataclass(slots=True)
class _Latency:
    per_read: float  # seconds
    per_byte: float  # seconds
    measured: float  # clock time of the last sample

    def expected(self, n: int) -> float:
        return self.per_read + (self.per_byte * n if n > SMALL_READ else 0.0)


class ReplicaPolicy:
    """Connect penalties, per-DataNode latency, and the hedging threshold."""

    def __init__(self, *, connect_penalty: float = 3.0, hedge_after: float | None = -1.0) -> None:
        """`hedge_after`: seconds for a fixed threshold, -1 for adaptive, None for no hedging."""
        self.connect_penalty = connect_penalty
        self.fixed_hedge = hedge_after
        self._refused_until: dict[str, float] = {}
        self._latency: dict[str, _Latency] = {}

    # ----- ordering -------------------------------------------------------------------------------

    def order(self, replicas: Sequence[tuple[str, R]], dead: set[str], now: float) -> list[tuple[str, R]]:
        """Replicas to try, best first: skip none, but put known-bad ones last."""
        if self._refused_until:
            self._refused_until = {a: t for a, t in self._refused_until.items() if t > now}
        best = self._best_per_read()
        if not dead and not self._refused_until and best is None:
            return list(replicas)
        recent = now - SLOW_MEMORY

        def rank(item: tuple[int, tuple[str, R]]) -> tuple[int, int]:
            index, (address, _) = item
            if address in dead:
                return (3, index)
            if address in self._refused_until:
                return (2, index)
            lat = self._latency.get(address)
            slow = best is not None and lat is not None and lat.per_read > max(SLOW_FACTOR * best, SLOW_FLOOR)
            if slow and lat is not None and lat.measured > recent:
                return (1, index)
            return (0, index)

        return [r for _, r in sorted(enumerate(replicas), key=rank)]

    def refused(self, address: str, now: float) -> None:
        """A connection to `address` failed: try it last everywhere for a short while."""
        self._refused_until[address] = now + self.connect_penalty

    # ----- latency --------------------------------------------------------------------------------

    def record(self, address: str, n: int, seconds: float, now: float) -> None:
        """A read of `n` bytes from `address` took `seconds` (or at least that, if it lost a race)."""
        lat = self._latency.get(address)
        if lat is None:
            small = n <= SMALL_READ
            self._latency[address] = _Latency(seconds if small else 0.0, 0.0 if small else seconds / n, now)
            return
        lat.measured = now
        if n <= SMALL_READ:
            lat.per_read += EWMA_WEIGHT * (seconds - lat.per_read)
        else:
            lat.per_byte += EWMA_WEIGHT * (max(0.0, seconds - lat.per_read) / n - lat.per_byte)

    def _best_per_read(self) -> float | None:
        return min((lat.per_read for lat in self._latency.values()), default=None)

    def hedge_after(self, n: int) -> float | None:
        """Seconds to wait on one replica before asking the next for the same `n` bytes."""
        if self.fixed_hedge is None:
            return None
        if self.fixed_hedge >= 0:
            return self.fixed_hedge
        known = list(self._latency.values())
        if not known:
            return HEDGE_DEFAULT
        best = min(lat.expected(n) for lat in known)
        return max(HEDGE_FLOOR, HEDGE_FACTOR * best)

    def snapshot(self) -> dict[str, float]:
        """Each DataNode's expected milliseconds for a 4 KiB read (for stats)."""
        return {a: round(lat.expected(4096) * 1000, 3) for a, lat in sorted(self._latency.items())}
