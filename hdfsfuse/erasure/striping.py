"""The striped layout of an erasure-coded block group, and the plan of an exact read. Pure code.

A group of N data bytes is cut into cells of C bytes, dealt round-robin to k data units; row r of
the group holds cells r*k .. r*k+k-1, and each row's m parity cells sit at the same place in the
parity units:

    group offset:  |cell 0 |cell 1 |cell 2 |cell 3 |cell 4 |cell 5 |cell 6 ...
                   +-------+-------+-------+-------+-------+-------+
    row 0:         | d0:0  | d1:0  | d2:0  | p0:0  | p1:0  |          (unit:offset in block)
    row 1:         | d0:C  | d1:C  | d2:C  | p0:C  | p1:C  |
                   +-------+-------+-------+-------+-------+
                    internal blocks: id = group id + unit index

A read becomes at most one exact range per data unit: the touched cells of one unit sit back to
back in its internal block, so each unit's bytes come from one READ_BLOCK and land in the
caller's buffer at `spans` (written there by the packet parser, by `placement`, or copied by
`scatter`). Parity is read only to decode a unit that failed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hdfsfuse.datanode.dtp import Placement
from hdfsfuse.erasure.codec import EcPolicy


def internal_length(group_bytes: int, policy: EcPolicy, index: int) -> int:
    """Bytes stored in internal block `index` of a group (StripedBlockUtil.getInternalBlockLength).

    A short last row holds min(max(L - j*C, 0), C) bytes of data unit j; parity units are as
    long as data unit 0. A unit with no bytes is not stored at all.
    """
    cell, k = policy.cell_size, policy.data_units
    stripe = cell * k
    if group_bytes % stripe == 0:
        return group_bytes // k
    full_rows = (group_bytes - 1) // stripe
    last = group_bytes - full_rows * stripe
    j = index if index < k else 0
    return full_rows * cell + min(max(last - j * cell, 0), cell)


@dataclass(slots=True)
class UnitRead:
    """One data unit's part of a read: in-block [start, end) and where each span goes."""

    unit: int
    start: int
    end: int
    spans: list[tuple[int, int, int]] = field(default_factory=list)  # (offset in block, offset in output, length)

    @property
    def length(self) -> int:
        return self.end - self.start

    def scatter(self, data: bytes | bytearray | memoryview, output: bytearray) -> None:
        """Copy this unit's bytes (in-block [start, end)) to their places in `output`."""
        view = memoryview(data)
        for at, out, n in self.spans:
            output[out : out + n] = view[at - self.start : at - self.start + n]

    def gather(self, output: bytearray) -> bytes:
        """This unit's bytes back from their places in `output` (the inverse of `scatter`)."""
        view = memoryview(output)
        return b"".join(view[out : out + n] for _, out, n in self.spans)

    def placement(self, policy: EcPolicy) -> Placement:
        """The same places as `spans`, as a READ_BLOCK parser writes them (no scatter copy):
        this unit's next cell comes after the k - 1 other units' cells of the row."""
        return Placement(self.spans[0][1], policy.cell_size, (policy.data_units - 1) * policy.cell_size)


def plan_group_read(policy: EcPolicy, offset: int, length: int) -> list[UnitRead]:
    """The per-unit exact ranges that serve group bytes [offset, offset+length), by unit index."""
    if offset < 0 or length <= 0:
        raise ValueError("a read needs offset >= 0 and length > 0")
    cell, k = policy.cell_size, policy.data_units
    reads: dict[int, UnitRead] = {}
    pos, end = offset, offset + length
    while pos < end:
        index, within = divmod(pos, cell)
        n = min(cell - within, end - pos)
        row, unit = divmod(index, k)
        at = row * cell + within
        read = reads.get(unit)
        if read is None:
            read = reads[unit] = UnitRead(unit, at, at + n)
        read.end = at + n  # the unit's cells come in row order, back to back in its block
        read.spans.append((at, pos - offset, n))
        pos += n
    return [reads[u] for u in sorted(reads)]


def decode_sources(policy: EcPolicy, erased: int, unusable: set[int]) -> list[int] | None:
    """The k units to decode `erased` from: data units first, then parity, in index order
    (as Hadoop's readers choose), skipping `unusable`; None when fewer than k remain."""
    candidates = [u for u in range(policy.units) if u != erased and u not in unusable]
    if len(candidates) < policy.data_units:
        return None
    return candidates[: policy.data_units]
