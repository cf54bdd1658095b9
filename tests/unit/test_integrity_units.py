"""Never a wrong byte, the pure parts: the block map refuses a changed identity and takes location
windows in any order; the negative cache stays bounded."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hdfsfuse import errors

KiB = 1024
MiB = 1 << 20


# ----- 1. an open file is pinned to its fileId and block ids ------------------------------------


def test_blockmap_refuses_changed_identity() -> None:
    from hdfsfuse.client.blockmap import BlockMap
    from hdfsfuse.proto import hdfs_pb2

    def lb(offset: int, block_id: int, n: int, pool: str = "bp") -> hdfs_pb2.LocatedBlockProto:
        b = hdfs_pb2.LocatedBlockProto(offset=offset)
        b.b.poolId, b.b.blockId, b.b.numBytes, b.b.generationStamp = pool, block_id, n, 1
        return b

    m = BlockMap("/f")
    assert m.merge([lb(0, 1, 100), lb(200, 3, 100)]) == [0, 200]
    assert m.first_gap(0, 300) == 100 and m.first_gap(0, 100) is None
    grown = lb(200, 3, 150)
    grown.b.generationStamp = 2  # hflush/append/recovery: same block, new stamp, longer
    m.merge([lb(100, 2, 100), grown])
    assert m.first_gap(0, 350) is None and [p.block_start for p in m.pieces(50, 300)] == [0, 100, 200]
    for bad, why in [(lb(0, 9, 100), "replaced"), (lb(0, 1, 100, pool="other"), "replaced"),
                     (lb(200, 3, 120), "truncated"), (lb(300, 1, 10), "moved"), (lb(150, 7, 10), "overlaps")]:
        with pytest.raises(errors.FileChanged, match=why):
            m.merge([bad])
    assert [b.b.blockId for b in m.blocks] == [1, 2, 3]  # a refused answer changes nothing


# ----- 2. files being written: tail -f sees every appended byte ---------------------------------


# ----- 4. snapshots and renames ------------------------------------------------------------------


# ----- library reads of files being written, and the location windows --------------------------


# ----- 3. no exception kills the mount ----------------------------------------------------------


# ----- 7. scale: streamed listings, bounded caches ------------------------------------------------


def test_negative_cache_is_bounded() -> None:
    from hdfsfuse.fuse.attributes import NEGATIVE_CACHE_MAX, NegativeCache

    negative = NegativeCache(timeout=60.0)
    for i in range(3 * NEGATIVE_CACHE_MAX):
        negative.remember((1, f"missing-{i}".encode()))
        assert len(negative) <= NEGATIVE_CACHE_MAX
    assert (1, f"missing-{3 * NEGATIVE_CACHE_MAX - 1}".encode()) in negative  # the newest are kept
    assert negative.missing((1, f"missing-{3 * NEGATIVE_CACHE_MAX - 1}".encode()))


@given(st.lists(st.integers(1, 3000), min_size=1, max_size=40), st.randoms(use_true_random=False))
def test_blockmap_takes_windows_in_any_order(lengths: list[int], rnd: random.Random) -> None:
    """Only the last block of a file being written can be empty, so blocks here hold a byte at least."""
    from hdfsfuse.client.blockmap import BlockMap
    from hdfsfuse.proto import hdfs_pb2

    located, offset = [], 0
    for i, n in enumerate(lengths):
        b = hdfs_pb2.LocatedBlockProto(offset=offset)
        b.b.poolId, b.b.blockId, b.b.numBytes = "bp", 1000 + i, n
        located.append(b)
        offset += n
    windows = [located[i : i + 10] for i in range(0, len(located), 10)]
    rnd.shuffle(windows)
    m = BlockMap("/f")
    for w in windows + windows[:1]:  # the last one again: a refresh of known blocks
        m.merge(w)
    assert m.starts == [b.offset for b in located] and m.first_gap(0, offset) is None
