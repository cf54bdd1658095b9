"""The file-range-to-block planner, table driven."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hdfsfuse.datanode.pieces import Piece, clamp, plan_pieces

MiB = 1 << 20
STARTS = [0, MiB, 2 * MiB]
LENGTHS = [MiB, MiB, 1000]


@pytest.mark.parametrize(
    ("offset", "length", "pieces"),
    [
        (0, 0, []),
        (0, 1, [Piece(0, 0, 1, 0, 0)]),
        (100, 4096, [Piece(0, 100, 4096, 0, 0)]),
        (MiB - 10, 20, [Piece(0, MiB - 10, 10, 0, 0), Piece(1, 0, 10, 10, MiB)]),
        (MiB, 10, [Piece(1, 0, 10, 0, MiB)]),
        (MiB - 1, MiB + 2, [Piece(0, MiB - 1, 1, 0, 0), Piece(1, 0, MiB, 1, MiB), Piece(2, 0, 1, MiB + 1, 2 * MiB)]),
        (2 * MiB + 999, 1, [Piece(2, 999, 1, 0, 2 * MiB)]),
        (0, 2 * MiB + 1000, [Piece(0, 0, MiB, 0, 0), Piece(1, 0, MiB, MiB, MiB), Piece(2, 0, 1000, 2 * MiB, 2 * MiB)]),
    ],
)
def test_plan_pieces(offset: int, length: int, pieces: list[Piece]) -> None:
    assert plan_pieces(STARTS, LENGTHS, offset, length) == pieces


def test_empty_block_is_skipped() -> None:
    assert plan_pieces([0, 10, 10], [10, 0, 5], 8, 4) == [Piece(0, 8, 2, 0, 0), Piece(2, 0, 2, 2, 10)]


def test_range_past_blocks_is_an_error() -> None:
    with pytest.raises(ValueError, match="past the last block"):
        plan_pieces(STARTS, LENGTHS, 2 * MiB, 1001)


def test_a_gap_between_known_blocks_is_an_error() -> None:
    with pytest.raises(ValueError, match="no block holds offset 100"):
        plan_pieces([0, 200], [100, 100], 50, 100)


@pytest.mark.parametrize(
    ("offset", "length", "file_length", "expected"),
    [(0, 10, 5, 5), (5, 10, 5, 0), (6, 10, 5, 0), (2, 2, 5, 2), (0, 0, 5, 0), (4, 1, 5, 1)],
)
def test_clamp(offset: int, length: int, file_length: int, expected: int) -> None:
    assert clamp(offset, length, file_length) == expected


@given(st.lists(st.integers(0, 50), min_size=1, max_size=8), st.data())
def test_pieces_cover_the_range_exactly(lengths: list[int], data: st.DataObject) -> None:
    starts = [sum(lengths[:i]) for i in range(len(lengths))]
    total = sum(lengths)
    offset = data.draw(st.integers(0, total))
    length = data.draw(st.integers(0, total - offset))
    pieces = plan_pieces(starts, lengths, offset, length)
    assert sum(p.length for p in pieces) == length
    pos = offset
    for p in pieces:
        assert p.length > 0 and starts[p.block_index] + p.offset_in_block == pos
        assert p.out_offset == pos - offset and p.block_start == starts[p.block_index]
        assert p.offset_in_block + p.length <= lengths[p.block_index]
        pos += p.length
