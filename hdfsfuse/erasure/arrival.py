"""Which bytes of a striped read in flight have landed, so a reader can take them before the rest.

A sequential reader's readahead of an erasure-coded file is one striped read of many cells: one
long READ_BLOCK per data unit, each unit's packets verified and written straight to its cells'
places in the read's buffer (`dtp.Placement`). A kernel request for the first cells of that
window need not wait for its last: it waits until the buffer's complete prefix covers it.

    buffer:     | c0 u0 | c1 u1 | c2 u2 | c3 u0 | c4 u1 | c5 u2 | ...
    delivered:  u0 up to the end of c3, u1 up to the end of c1, u2 up to the end of c2
    ready:      [0, end of c3): a reader of c0..c3 goes on; one of c4 waits for unit 1

Only verified bytes are reported (a unit's parser has checked every chunk below the position it
reports), so a prefix once ready never changes: a unit that fails later and is decoded gets the
same bytes written again. Cells of a unit that never reports (it failed, or the bytes came from
the block cache) are ready only when the whole read is: a reader then waits for the read.
"""

from __future__ import annotations

import trio

from hdfsfuse.erasure.striping import UnitRead


class Arrival:
    """The complete prefix of one striped read's buffer while the read runs (one trio task's)."""

    def __init__(self) -> None:
        self.buffer: bytearray | None = None
        self.ready = 0  # buffer bytes [0, ready) are final
        self.finished = False
        self._spans: list[tuple[int, int, int, int]] = []  # (buffer offset, unit, in-block offset, length), in order
        self._next = 0  # spans before this one are ready
        self._delivered: dict[int, int] = {}  # unit -> in-block offset its verified bytes reach
        self._lot = trio.lowlevel.ParkingLot()

    def start(self, buffer: bytearray, reads: list[UnitRead]) -> None:
        """The read's buffer and plan: each unit's spans, as the parsers will fill them."""
        self.buffer = buffer
        self.ready, self._next, self._delivered = 0, 0, {}  # a retry starts over in a new buffer
        self._spans = sorted((out, r.unit, at, n) for r in reads for at, out, n in r.spans)

    def delivered(self, unit: int, upto: int) -> None:
        """Unit `unit`'s bytes below in-block offset `upto` are verified and in place."""
        if upto <= self._delivered.get(unit, -1):
            return
        self._delivered[unit] = upto
        spans, i, delivered = self._spans, self._next, self._delivered
        while i < len(spans) and delivered.get(spans[i][1], -1) >= spans[i][2] + spans[i][3]:
            i += 1  # spans before i are whole
        ready = spans[i - 1][0] + spans[i - 1][3] if i else 0
        if i < len(spans):  # and the next one may have begun
            out, u, at, n = spans[i]
            ready = max(ready, out + min(n, max(0, delivered.get(u, -1) - at)))
        self._next = i
        if ready > self.ready:
            self.ready = ready
            self._lot.unpark_all()

    def finish(self) -> None:
        """The read is over, whatever its outcome: nobody waits any longer."""
        self.finished = True
        self._lot.unpark_all()

    async def wait_for(self, end: int) -> bool:
        """Wait until buffer bytes [0, end) are final (True) or the read is over short of them."""
        while self.ready < end and not self.finished:
            await self._lot.park()
        return self.ready >= end
