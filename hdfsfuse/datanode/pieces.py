"""Planning reads: which byte ranges of which blocks serve a file range. Pure code, no I/O.

    file:   |<---- block 0 ---->|<---- block 1 ---->|<-- block 2 -->|
    read:            [=============================]
    pieces:          [ piece 0  ][     piece 1      ]
                      (block 0,    (block 1, offset 0,
                       offset k)    out_offset = len(piece 0))
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Piece:
    block_index: int
    offset_in_block: int
    length: int
    out_offset: int  # where these bytes go in the caller's result
    block_start: int = 0  # the block's file offset: names the block across location refreshes


def clamp(offset: int, length: int, file_length: int) -> int:
    """The length actually readable at `offset` (reads stop at EOF)."""
    if offset < 0 or length < 0:
        raise ValueError("offset and length must be non-negative")
    return max(0, min(length, file_length - offset))


def plan_pieces(block_starts: Sequence[int], block_lengths: Sequence[int], offset: int, length: int) -> list[Piece]:
    """Split [offset, offset+length) into per-block pieces; the range must lie within the blocks."""
    pieces: list[Piece] = []
    if length <= 0:
        return pieces
    i = bisect.bisect_right(block_starts, offset) - 1
    if i < 0:
        raise ValueError(f"offset {offset} precedes the first block")
    pos, end = offset, offset + length
    while pos < end:
        if i >= len(block_starts):
            raise ValueError(f"range ends at {end}, past the last block")
        start = block_starts[i]
        if start > pos:
            raise ValueError(f"no block holds offset {pos}")
        block_end = start + block_lengths[i]
        if pos >= block_end:  # an empty block, or the range starts at this block's end
            i += 1
            continue
        n = min(end, block_end) - pos
        pieces.append(Piece(i, pos - start, n, pos - offset, start))
        pos += n
        i += 1
    return pieces
