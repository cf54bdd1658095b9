"""The blocks an open file knows, and the identity it is pinned to. Pure code, no I/O.

Locations arrive in windows (ten blocks' worth, as Java's DFSInputStream fetches them), so a
huge file never needs one giant getBlockLocations answer:

    file:   |<- b0 ->|<- b1 ->| ... |<- b9 ->|<- b10 ->| ...  |<- b79999 ->|
    known:  [ window at 0: b0 .. b9 ]          (gap: fetched on demand)  [last block]
    read:        [====]           planned at once, over known blocks
    read:                              [====]  first_gap() -> fetch the window there

Identity: a block once seen at a file offset keeps its (block pool, block id) for as long as the
file is open. Its generation stamp and length may move on (hflush, append, recovery), but its
length never shrinks. A location answer that breaks this means the path now names other bytes
(the file was replaced, truncated or rewritten), and `merge` raises `FileChanged` rather than let
a read return another file's bytes. Java's DFSInputStream fails the same way ("Blocklist for
src has changed!").
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

from hdfsfuse.datanode.pieces import Piece, plan_pieces
from hdfsfuse.errors import FileChanged
from hdfsfuse.proto import hdfs_pb2

LocatedBlock = hdfs_pb2.LocatedBlockProto


class BlockMap:
    """Known located blocks of one file, sorted by file offset, with their identity pins."""

    __slots__ = ("_offsets_by_id", "_pins", "blocks", "lengths", "starts", "what")

    def __init__(self, what: str) -> None:
        self.what = what
        self.starts: list[int] = []
        self.lengths: list[int] = []
        self.blocks: list[LocatedBlock] = []
        self._pins: dict[int, tuple[str, int, int]] = {}  # offset -> (pool id, block id, longest length seen)
        self._offsets_by_id: dict[int, int] = {}  # block id -> the offset it is pinned at

    def merge(self, located: Iterable[LocatedBlock]) -> list[int]:
        """Take fresh locations in; return the offsets of blocks that were replaced or added.

        Everything is checked before anything is stored, so a refused answer changes nothing.
        The cost is O(k log n) for k fresh blocks, so a huge file read window by window stays cheap.
        """
        fresh = sorted(located, key=lambda b: b.offset)
        for lb in fresh:
            self._check(lb)
        self._check_layout(fresh)
        for lb in fresh:
            i = bisect.bisect_left(self.starts, lb.offset)
            if i < len(self.starts) and self.starts[i] == lb.offset:
                self.blocks[i] = lb
                self.lengths[i] = lb.b.numBytes
            else:
                self.starts.insert(i, lb.offset)
                self.lengths.insert(i, lb.b.numBytes)
                self.blocks.insert(i, lb)
            pool, block_id, longest = self._pins.get(lb.offset, (lb.b.poolId, lb.b.blockId, 0))
            self._pins[lb.offset] = (pool, block_id, max(longest, lb.b.numBytes))
            self._offsets_by_id[block_id] = lb.offset
        return [lb.offset for lb in fresh]

    def _check(self, lb: LocatedBlock) -> None:
        pin = self._pins.get(lb.offset)
        if pin is not None:
            pool, block_id, longest = pin
            if (lb.b.poolId, lb.b.blockId) != (pool, block_id):
                raise FileChanged(
                    f"{self.what} was replaced since it was opened: the block at offset {lb.offset} is now "
                    f"block {lb.b.blockId}, not block {block_id}"
                )
            if lb.b.numBytes < longest:
                raise FileChanged(
                    f"{self.what} was truncated since it was opened: block {block_id} at offset {lb.offset} "
                    f"shrank from {longest} to {lb.b.numBytes} bytes"
                )
        offset = self._offsets_by_id.get(lb.b.blockId)
        if offset is not None and offset != lb.offset:
            raise FileChanged(
                f"{self.what} was rewritten since it was opened: block {lb.b.blockId} moved from offset "
                f"{offset} to {lb.offset}"
            )

    def _check_layout(self, fresh: list[LocatedBlock]) -> None:
        """No fresh block may overlap its neighbours, known or fresh (fresh lengths win)."""
        fresh_lengths = {lb.offset: lb.b.numBytes for lb in fresh}
        for k, lb in enumerate(fresh):
            start, end = lb.offset, lb.offset + lb.b.numBytes
            i = bisect.bisect_left(self.starts, start)
            before = [(fresh[k - 1].offset, fresh[k - 1].b.numBytes)] if k else []
            if i > 0:
                s = self.starts[i - 1]
                before.append((s, fresh_lengths.get(s, self.lengths[i - 1])))
            j = bisect.bisect_right(self.starts, start)
            after = [fresh[k + 1].offset] if k + 1 < len(fresh) else []
            after += self.starts[j : j + 1]
            prev_start, prev_length = max(before, default=(start, 0))
            if prev_start < start and prev_start + prev_length > start:
                raise FileChanged(
                    f"{self.what} was rewritten since it was opened: the block at offset {prev_start} "
                    f"overlaps block {lb.b.blockId} at offset {start}"
                )
            if after and end > min(after):
                raise FileChanged(
                    f"{self.what} was rewritten since it was opened: block {lb.b.blockId} "
                    f"overlaps the block at offset {min(after)}"
                )

    def first_gap(self, offset: int, length: int) -> int | None:
        """The first offset of [offset, offset+length) that no known block holds, or None."""
        pos, end = offset, offset + length
        i = bisect.bisect_right(self.starts, pos) - 1
        if i < 0:
            return pos
        while pos < end:
            if i >= len(self.starts) or self.starts[i] > pos:
                return pos
            pos = max(pos, self.starts[i] + self.lengths[i])
            i += 1
        return None

    def pieces(self, offset: int, length: int) -> list[Piece]:
        """Per-block pieces of a range that `first_gap` found fully known."""
        return plan_pieces(self.starts, self.lengths, offset, length)

    def holding(self, offset: int, length: int) -> LocatedBlock | None:
        """The one known block holding all of [offset, offset+length), or None."""
        i = bisect.bisect_right(self.starts, offset) - 1
        if i < 0 or offset + length > self.starts[i] + self.lengths[i]:
            return None
        return self.blocks[i]

    def block_at(self, start: int) -> LocatedBlock:
        """The block that starts at file offset `start` (a piece's `block_start`)."""
        i = bisect.bisect_left(self.starts, start)
        if i == len(self.starts) or self.starts[i] != start:
            raise FileChanged(f"{self.what} changed since it was opened: no block starts at offset {start} any more")
        return self.blocks[i]
