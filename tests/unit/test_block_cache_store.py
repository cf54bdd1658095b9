"""The block cache's files, directly: what is stored is served verified, and every torn, truncated
or flipped state (what a crash or a bad disk leaves) is a miss or a counted corruption, never
wrong bytes. The mount-level tests are in test_block_cache_mount.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hdfsfuse.datanode.checksum import CHECKSUM_CRC32, CHECKSUM_CRC32C, CHECKSUM_NULL, Checksum
from hdfsfuse.datanode.context import BlockKey
from hdfsfuse.local.blockcache import layout
from hdfsfuse.local.blockcache.layout import RECHECK, SUBDIR, CacheCorrupt
from hdfsfuse.local.blockcache.store import BlockCache
from hdfsfuse.local.verified_io import WouldBlock
from tests.page_residency import (
    drop_pages,
    page_cache_bypass_unavailable,
    resident_pages,
    until_a_read_meets_a_cold_page,
    wait_until_resident,
)

BPC = 512
KEY = BlockKey("BP-1", 1073741825, 1001)
BLOCK = bytes((i * 7 + 3) % 256 for i in range(10 * BPC + 100))  # ten chunks and a short last one
CRC = Checksum(CHECKSUM_CRC32C, BPC)


def _cache(tmp_path: Path, capacity: int = 1 << 30) -> BlockCache:
    cache = BlockCache(str(tmp_path), capacity)
    cache.open()
    return cache


def _store(cache: BlockCache, start_chunk: int, end_chunk: int, key: BlockKey = KEY, block: bytes = BLOCK,
           checksum: Checksum = CRC) -> None:
    start, end = start_chunk * BPC, min(end_chunk * BPC, len(block))
    data = block[start:end]
    cache.store(key, len(block), checksum, start, data, checksum.compute(data))


def _file(tmp_path: Path, key: BlockKey = KEY) -> Path:
    return tmp_path / SUBDIR / key.pool / f"{key.stem()}.blk"


DATA_AT = 4096  # BLOCK's bytes start here in its file (after 20 + 11 x 5 bytes, page-aligned)


def test_stored_chunks_are_served_exactly_and_others_miss(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    assert cache.read(KEY, len(BLOCK), 0, 100) is None  # nothing stored
    _store(cache, 2, 5)
    assert cache.read(KEY, len(BLOCK), 2 * BPC, 3 * BPC) == BLOCK[2 * BPC : 5 * BPC]
    assert cache.read(KEY, len(BLOCK), 2 * BPC + 7, 100) == BLOCK[2 * BPC + 7 : 2 * BPC + 107]
    assert cache.read(KEY, len(BLOCK), 2 * BPC, 3 * BPC + 1) is None  # one byte into an absent chunk
    assert cache.read(KEY, len(BLOCK), BPC + 511, 2) is None
    _store(cache, 9, 11)  # the short last chunk
    assert cache.read(KEY, len(BLOCK), 9 * BPC, 612) == BLOCK[9 * BPC :]
    assert cache.read(BlockKey(KEY.pool, KEY.block_id, 1002), len(BLOCK), 2 * BPC, 10) is None  # another stamp
    assert cache.counters.corrupt == 0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10), st.integers(1, 11)), min_size=1, max_size=5),
       st.integers(0, len(BLOCK) - 1), st.integers(1, 3000), st.sampled_from([CHECKSUM_CRC32C, CHECKSUM_CRC32]))
def test_any_read_is_exact_or_a_miss(tmp_path_factory: pytest.TempPathFactory, stores: list[tuple[int, int]],
                                     offset: int, length: int, kind: int) -> None:
    tmp = tmp_path_factory.mktemp("cache")
    cache = _cache(tmp)
    checksum = Checksum(kind, BPC)
    held = set()
    for a, b in stores:
        if a < b:
            _store(cache, a, b, checksum=checksum)
            held |= set(range(a, b))
    length = min(length, len(BLOCK) - offset)
    got = cache.read(KEY, len(BLOCK), offset, length)
    needed = set(range(offset // BPC, (offset + length - 1) // BPC + 1))
    assert got == (BLOCK[offset : offset + length] if needed <= held else None)


@pytest.mark.parametrize("damage", ["flip data", "truncate data", "flip sum", "bad header", "other length"])
def test_damaged_files_are_dropped_and_counted_never_served(tmp_path: Path, damage: str) -> None:
    cache = _cache(tmp_path)
    _store(cache, 0, 11)
    f = _file(tmp_path)
    raw = bytearray(f.read_bytes())
    assert raw[DATA_AT:] == BLOCK
    if damage == "flip data":
        raw[DATA_AT + 3 * BPC + 5] ^= 0x40
    elif damage == "truncate data":
        raw = raw[: DATA_AT + 6 * BPC + 1]
    elif damage == "flip sum":
        raw[20 + 3 * 4] ^= 1  # chunk 3's checksum
    elif damage == "bad header":
        raw[0:4] = b"XXXX"
    f.write_bytes(raw)
    length = len(BLOCK) if damage != "other length" else len(BLOCK) + 1
    with pytest.raises(CacheCorrupt):
        cache.read(KEY, length, 3 * BPC, 4 * BPC)
    assert cache.counters.corrupt == 1
    assert not f.exists()  # dropped: the next read is a plain miss
    assert cache.read(KEY, len(BLOCK), 3 * BPC, 10) is None


def test_a_crash_between_data_and_entries_is_a_miss(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    _store(cache, 0, 4)
    f = _file(tmp_path)
    raw = bytearray(f.read_bytes())
    flags = 20 + 4 * 11  # after the header and eleven checksums
    assert raw[flags : flags + 11] == b"\x01" * 4 + bytes(7)  # chunks 0-3 stored
    raw[flags + 2 : flags + 4] = b"\x00\x00"  # chunks 2 and 3: data and checksums written, flags not
    f.write_bytes(raw)
    assert cache.read(KEY, len(BLOCK), 0, 2 * BPC) == BLOCK[: 2 * BPC]
    assert cache.read(KEY, len(BLOCK), BPC, 2 * BPC) is None
    assert cache.counters.corrupt == 0


def test_null_checksums_are_not_cached(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    cache.store(KEY, len(BLOCK), Checksum(CHECKSUM_NULL, BPC), 0, BLOCK[:BPC], b"")
    assert cache.read(KEY, len(BLOCK), 0, 10) is None
    with pytest.raises(ValueError, match="whole chunks"):
        cache.store(KEY, len(BLOCK), CRC, 3, BLOCK[3:BPC], CRC.compute(BLOCK[3:BPC]))


def test_least_recently_used_blocks_go_first(tmp_path: Path) -> None:
    keys = [BlockKey("BP-1", 100 + i, 1) for i in range(4)]
    cache = _cache(tmp_path)
    for k in keys:
        _store(cache, 0, 11, key=k)
    one = cache.used // 4
    cache.read(keys[0], len(BLOCK), 0, 10)  # the oldest store is now the most recent use
    cache.evict_to(2 * one)
    assert [cache.read(k, len(BLOCK), 0, 10) is not None for k in keys] == [True, False, False, True]
    assert cache.counters.evictions == 2
    assert cache.used == 2 * one


def test_stores_beyond_the_capacity_evict(tmp_path: Path) -> None:
    cache = _cache(tmp_path, capacity=3 * 16 * 1024)
    for i in range(8):
        _store(cache, 0, 11, key=BlockKey("BP-1", 200 + i, 1))
        assert cache.used <= cache.capacity
    disk = sum(p.stat().st_blocks * 512 for p in (tmp_path / SUBDIR).rglob("*") if p.is_file())
    assert disk == cache.used <= cache.capacity
    held = sum(cache.read(BlockKey("BP-1", 200 + i, 1), len(BLOCK), 0, 10) is not None for i in range(8))
    assert 1 <= held < 8 and cache.counters.evictions == 8 - held


def test_a_second_instance_sees_the_first_ones_blocks(tmp_path: Path) -> None:
    first = _cache(tmp_path)
    _store(first, 0, 11)
    second = _cache(tmp_path)
    assert second.used == first.used > 0
    assert second.read(KEY, len(BLOCK), 0, len(BLOCK)) == BLOCK
    second.evict_to(0)
    first.rescan()
    assert first.used == 0 and first.read(KEY, len(BLOCK), 0, 10) is None


def test_an_unusable_directory_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(OSError, match="is not usable"):
        BlockCache(str(blocker), 1 << 20).open()


def test_lookups_in_threads_under_evictions_are_exact_or_misses(tmp_path: Path) -> None:
    import threading

    keys = [BlockKey("BP-1", 300 + i, 1) for i in range(6)]
    cache = _cache(tmp_path)
    wrong: list[tuple[BlockKey, int]] = []
    stop = threading.Event()

    def reader(seed: int) -> None:
        import random

        rng = random.Random(seed)
        while not stop.is_set():
            k = rng.choice(keys)
            off = rng.randrange(len(BLOCK))
            n = min(rng.randrange(1, 2000), len(BLOCK) - off)
            try:
                got = cache.read(k, len(BLOCK), off, n)
            except CacheCorrupt:
                got = None
                wrong.append((k, -1))
            if got is not None and got != BLOCK[off : off + n]:
                wrong.append((k, off))

    def churn() -> None:
        i = 0
        while not stop.is_set():
            _store(cache, 0, 11, key=keys[i % len(keys)])
            cache.evict_to(cache.used // 2)
            i += 1

    threads = [threading.Thread(target=reader, args=(s,)) for s in range(3)] + [threading.Thread(target=churn)]
    for t in threads:
        t.start()
    stop.wait(1.5)
    stop.set()
    for t in threads:
        t.join()
    assert wrong == []
    assert cache.counters.evictions > 10


def test_nowait_lookups_never_wait_for_files_or_disks(tmp_path: Path) -> None:
    from hdfsfuse.local.verified_io import WouldBlock

    cache = _cache(tmp_path)
    _store(cache, 0, 11)
    with pytest.raises(WouldBlock):  # not open yet: opening is for a worker thread
        cache.read(KEY, len(BLOCK), 100, 1000, nowait=True)
    assert cache.read(KEY, len(BLOCK), 100, 1000) == BLOCK[100:1100]
    assert cache.read(KEY, len(BLOCK), 100, 1000, nowait=True) == BLOCK[100:1100]  # open, and in memory

    def nowait_lookup() -> bool:  # the bytes are on disk only now
        try:
            got = cache.read(KEY, len(BLOCK), 100, 1000, nowait=True)
        except WouldBlock:
            return True
        assert got == BLOCK[100:1100]  # from memory after all: still right
        return False

    until_a_read_meets_a_cold_page([_file(tmp_path)], nowait_lookup)
    assert cache.read(KEY, len(BLOCK), 100, 1000) == BLOCK[100:1100]


def test_a_lookup_that_waits_for_the_disk_reads_in_the_blocks_checksums(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A lookup that must wait for the disk asks the kernel for its data and all of its block's
    checksums and flags at once, so it waits for one disk read, and the block's next lookups
    wait for their data alone. The nowait lookup of the trio loop asks before it gives up."""
    from hdfsfuse.local.verified_io import WouldBlock

    chunks = 4096  # a 20-byte header, 16 KiB of checksums, 4 KiB of flags: data from page 6
    big = bytes((i * 13 + 5) % 251 for i in range(chunks * BPC))
    cache = _cache(tmp_path)
    _store(cache, 0, chunks, block=big)
    path = _file(tmp_path)
    assert cache.read(KEY, len(big), 7, 100) == big[7:107]  # the block is open now
    meta = list(range(6))
    data_page = 6 + 300 * BPC // 4096  # the page a lookup at chunk 300 reads
    far_data = 6 + 400  # a page of data no lookup touches

    drop_pages(path)
    other = _cache(tmp_path)  # another mount: the block is not open there, so its lookup is a thread's
    assert other.read(KEY, len(big), 7, 100) == big[7:107]
    wait_until_resident(path, meta)
    assert not resident_pages(path)[far_data]

    monkeypatch.setattr(layout, "META_ADVICE_SECONDS", 0.0)  # (once a second per block)

    def nowait_lookup() -> bool:
        try:
            got = cache.read(KEY, len(big), 300 * BPC + 7, 100, nowait=True)
        except WouldBlock:
            return True
        assert got == big[300 * BPC + 7 : 300 * BPC + 107]  # from memory after all: still right
        return False

    until_a_read_meets_a_cold_page([path], nowait_lookup)
    wait_until_resident(path, [*meta, data_page])  # the checksums, the flags and the data asked for
    assert not resident_pages(path)[far_data]
    assert cache.read(KEY, len(big), 300 * BPC + 7, 100, nowait=True) == big[300 * BPC + 7 : 300 * BPC + 107]


def test_inline_lookups_serve_hits_in_memory_and_leave_the_rest_to_the_usual_path(tmp_path: Path) -> None:
    """`CachedReads.read_now`, the mount's hot path: a small hit of an open block whose bytes
    are in memory is served (and counted) inline; anything else is None, for `read` to handle,
    and a corrupt entry is dropped and counted on the way."""
    from hdfsfuse.local.blockcache.reads import NOWAIT_MAX, CachedReads
    from hdfsfuse.proto import hdfs_pb2
    from hdfsfuse.stats import Stats

    cache = _cache(tmp_path)
    stats = Stats()
    reads = CachedReads(cache, stats, nursery=None, local_io=None)  # type: ignore[arg-type]  # read_now uses neither
    block = hdfs_pb2.ExtendedBlockProto(poolId=KEY.pool, blockId=KEY.block_id, generationStamp=KEY.generation_stamp,
                                        numBytes=len(BLOCK))
    _store(cache, 0, 6)
    assert reads.read_now(block, 100, 1000) is None  # stored, but not open: opening is a thread's
    assert cache.read(KEY, len(BLOCK), 0, 1) == BLOCK[:1]  # now it is open
    assert reads.read_now(block, 100, 1000) == BLOCK[100:1100]
    assert reads.read_now(block, 5 * BPC, BPC + 1) is None  # one byte into chunk 6, which is not stored
    assert reads.read_now(block, 0, 10) == BLOCK[:10]  # the miss left the files open (`read` reopens them)
    newer = hdfs_pb2.ExtendedBlockProto(poolId=KEY.pool, blockId=KEY.block_id, generationStamp=KEY.generation_stamp + 1,
                                        numBytes=len(BLOCK))
    assert reads.read_now(newer, 100, 1000) is None  # an append's new stamp: another block
    assert stats.cache_hits["block_cache"] == 2 and stats.block_cache_served_bytes == 1010
    big = BlockKey(KEY.pool, 7, 1)
    big_block = bytes(range(256)) * (NOWAIT_MAX // 256 + 4)
    _store(cache, 0, len(big_block) // BPC, key=big, block=big_block)
    assert cache.read(big, len(big_block), 0, 1) == big_block[:1]
    assert reads.read_now(hdfs_pb2.ExtendedBlockProto(poolId=big.pool, blockId=7, generationStamp=1,
                                                      numBytes=len(big_block)), 0, NOWAIT_MAX + 1) is None
    assert stats.cache_hits["block_cache"] == 2  # larger lookups verify in a thread
    f = _file(tmp_path)
    raw = bytearray(f.read_bytes())
    raw[DATA_AT + 2 * BPC + 9] ^= 0x01
    f.write_bytes(raw)
    assert reads.read_now(block, 2 * BPC, 100) is None
    assert stats.block_cache_corrupt == 1 and not f.exists()
    assert stats.cache_hits["block_cache"] == 2


def test_a_large_lookup_reads_its_bytes_past_the_page_cache_and_still_verifies_them(tmp_path: Path) -> None:
    """A sequential reader's lookup (over 128 KiB) reads the block's bytes with O_DIRECT: exact,
    every chunk verified (a flipped bit is a counted corruption), and none of the data's pages
    left in memory; only the checksums and flags are read through the page cache."""
    unavailable = page_cache_bypass_unavailable(tmp_path)
    if unavailable is not None:
        pytest.skip(unavailable)
    chunks = 4096  # 2 MiB: a 20-byte header, 16 KiB of checksums, 4 KiB of flags, data from page 6
    big = bytes((i * 13 + 5) % 251 for i in range(chunks * BPC))
    cache = _cache(tmp_path)
    _store(cache, 0, chunks, block=big)
    path = _file(tmp_path)
    drop_pages(path)
    assert cache.read(KEY, len(big), 1000 * BPC + 3, 1 << 20) == big[1000 * BPC + 3 : 1000 * BPC + 3 + (1 << 20)]
    data_pages = resident_pages(path)[6:]
    assert not any(data_pages), f"{sum(data_pages)} data pages were left in memory"
    assert cache.read(KEY, len(big), 0, len(big)) == big
    assert cache.counters.corrupt == 0

    with open(path, "r+b") as f:  # one bit of chunk 3000, on the disk
        at = 6 * 4096 + 3000 * BPC + 17
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ 0x04]))
    drop_pages(path)
    with pytest.raises(CacheCorrupt):
        cache.read(KEY, len(big), 2048 * BPC, 1 << 20)
    assert cache.counters.corrupt == 1
    assert cache.read(KEY, len(big), 0, 100) is None  # dropped: a miss from now on


def _preads(reads: list[tuple[int, bytearray, int]]) -> list[int]:
    """What hdfsfuse.local.uring's pread_into does, done here with os.preadv."""
    return [os.preadv(fd, [buf], off) for fd, buf, off in reads]


def test_a_lookup_whose_preads_run_elsewhere_is_exact_a_miss_or_rechecked(tmp_path: Path) -> None:
    """begin_lookup / finish_lookup (the io_uring path): exact bytes, a miss for absent chunks,
    and, for bytes that do not verify, RECHECK (never bytes): the ordered `read` then decides."""
    cache = _cache(tmp_path)
    _store(cache, 0, 6)
    with pytest.raises(WouldBlock):  # the block's files are not open yet: a thread opens them
        cache.begin_lookup(KEY, len(BLOCK), 0, 10)
    assert cache.read(KEY, len(BLOCK), 0, 10) == BLOCK[:10]
    for offset, length in [(0, 10), (BPC - 1, 2), (3 * BPC + 5, 2 * BPC)]:
        lookup = cache.begin_lookup(KEY, len(BLOCK), offset, length)
        assert cache.finish_lookup(lookup, _preads(lookup.reads)) == BLOCK[offset : offset + length]
    lookup = cache.begin_lookup(KEY, len(BLOCK), 5 * BPC, BPC + 1)  # one byte into chunk 6, not stored
    assert cache.finish_lookup(lookup, _preads(lookup.reads)) is None
    assert cache.read(KEY, len(BLOCK), 0, 10) == BLOCK[:10]  # the miss closed the files; reopened
    lookup = cache.begin_lookup(KEY, len(BLOCK), 2 * BPC, 100)
    got = _preads(lookup.reads)
    lookup.reads[0][1][7] ^= 0x10  # a bit flipped on disk
    assert cache.finish_lookup(lookup, got) is RECHECK
    lookup = cache.begin_lookup(KEY, len(BLOCK), 2 * BPC, 100)
    got = _preads(lookup.reads)
    got[0] -= 1  # a file that ends early
    assert cache.finish_lookup(lookup, got) is RECHECK
    assert cache.counters.corrupt == 0  # nothing proven yet
    lookup = cache.begin_lookup(KEY, len(BLOCK), 0, 10)
    assert cache.finish_lookup(lookup, OSError(5, "Input/output error")) is None
    assert cache.counters.errors == 1
    lookup = cache.begin_lookup(KEY, len(BLOCK), 0, 10) if cache.read(KEY, len(BLOCK), 0, 10) else None
    assert lookup is not None
    cache.abandon_lookup(lookup)  # a cancelled reader: the files are released, nothing counted
    assert cache.counters.errors == 1 and cache.counters.corrupt == 0
    cache.close()


def test_a_large_lookup_done_elsewhere_reads_its_data_past_the_page_cache(tmp_path: Path) -> None:
    """A large lookup from begin_lookup reads its data through the block's O_DIRECT open into
    an aligned buffer: exact, verified, and a refused or short direct read is RECHECK."""
    block = bytes((i * 13 + 1) % 251 for i in range(1 << 20))  # 2048 chunks
    key = BlockKey("BP-1", 1073741900, 1001)
    cache = _cache(tmp_path)
    cache.store(key, len(block), CRC, 0, block, CRC.compute(block))
    unavailable = page_cache_bypass_unavailable(_file(tmp_path, key))
    if unavailable is not None:
        pytest.skip(unavailable)
    assert cache.read(key, len(block), 0, 10) == block[:10]  # opens the block's files
    drop_pages(_file(tmp_path, key))
    for offset, length in [(0, len(block)), (4096 * 5 + 3, 300_000), (512 * 1000, 200_000)]:
        lookup = cache.begin_lookup(key, len(block), offset, length)
        assert lookup.direct == ((offset // BPC * BPC) % 4096 == 0)
        assert cache.finish_lookup(lookup, _preads(lookup.reads)) == block[offset : offset + length]
    assert sum(resident_pages(_file(tmp_path, key))[DATA_AT_BIG // 4096 :]) <= 100  # data pages: direct
    lookup = cache.begin_lookup(key, len(block), 512 * 3 + 7, 300_000)  # a start not 4 KiB-aligned
    assert not lookup.direct
    assert cache.finish_lookup(lookup, _preads(lookup.reads)) == block[512 * 3 + 7 : 512 * 3 + 7 + 300_000]
    lookup = cache.begin_lookup(key, len(block), 0, 300_000)
    assert lookup.direct
    got = _preads(lookup.reads)
    lookup.reads[0][1][70_000] ^= 1
    assert cache.finish_lookup(lookup, got) is RECHECK  # `read` decides, in order
    lookup = cache.begin_lookup(key, len(block), 0, 300_000)
    got = _preads(lookup.reads)
    got[0] = 8192  # a direct read cut short
    assert cache.finish_lookup(lookup, got) is RECHECK
    lookup = cache.begin_lookup(key, len(block), 0, 300_000)
    assert cache.finish_lookup(lookup, OSError(22, "Invalid argument")) is RECHECK
    assert cache.counters.errors == 0 and cache.counters.corrupt == 0
    cache.close()


DATA_AT_BIG = -(-(20 + 5 * 2048) // 4096) * 4096  # a 1 MiB block's bytes start here in its file


async def test_an_inline_lookup_may_poll_the_disk_for_cold_bytes_and_still_verifies_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`read_now(poll=True)` (a mount's only read in flight): bytes only on disk are polled
    for, inline, and verified; a flipped bit on disk is never served: counted, the block
    dropped, and the usual path (`read`) reads the range from HDFS."""
    import trio
    import trio.testing

    from hdfsfuse.local.blockcache import reads
    from hdfsfuse.local.blockcache.reads import CachedReads
    from hdfsfuse.local.io_threads import LocalIoThreads
    from hdfsfuse.local.verified_io import WouldBlock
    from hdfsfuse.proto import hdfs_pb2
    from hdfsfuse.stats import Stats

    # The mount polls for 250 us, about five cold reads of this VM's disk, and then goes the
    # usual way; the disk is sometimes slower than that. Poll long enough that it always lands.
    monkeypatch.setattr(reads, "POLL_NS", 5_000_000_000)

    cache = _cache(tmp_path)
    stats = Stats()
    block = hdfs_pb2.ExtendedBlockProto(poolId=KEY.pool, blockId=KEY.block_id, generationStamp=KEY.generation_stamp,
                                        numBytes=len(BLOCK))
    _store(cache, 0, 11)
    path = _file(tmp_path)
    fetched: list[int] = []

    async def fetch(keep: list[object]) -> bytes:
        fetched.append(1)
        return BLOCK[2 * BPC : 2 * BPC + 100]

    async with trio.open_nursery() as nursery:
        local_io = LocalIoThreads()
        nursery.start_soon(local_io.serve)
        await trio.testing.wait_all_tasks_blocked()
        reads = CachedReads(cache, stats, nursery, local_io)
        assert not cache.is_open(KEY)
        assert reads.read_now(block, 0, 10, poll=True) is None  # no files open to poll: opening is a thread's
        assert cache.read(KEY, len(BLOCK), 0, 1) == BLOCK[:1]  # opens the block's files
        assert cache.is_open(KEY)
        drop_pages(path)
        # Not allowed to wait: left to `read`. (The RWF_NOWAIT miss starts the disk read, and this
        # VM's disk can finish it before the kernel looks again: then the bytes come, unpolled.)
        got = reads.read_now(block, 3 * BPC + 5, 700)
        assert got is None or got == BLOCK[3 * BPC + 5 : 3 * BPC + 705]
        assert stats.local_disk_reads["polled"] == 0
        real_read = cache.read
        misses = [2]

        def first_looks_miss(*args: object, **kw: object) -> object:
            """read_now's first look and its first poll find the bytes on disk, as they do when
            the disk is slower than the kernel's own look (this VM's disk often is not)."""
            if kw.get("nowait") and misses[0]:
                misses[0] -= 1
                drop_pages(path)
                raise WouldBlock("on disk")
            return real_read(*args, **kw)  # type: ignore[arg-type]

        hits = stats.cache_hits["block_cache"]
        with monkeypatch.context() as patched:
            patched.setattr(cache, "read", first_looks_miss)
            assert reads.read_now(block, 3 * BPC + 5, 700, poll=True) == BLOCK[3 * BPC + 5 : 3 * BPC + 705]
        assert stats.local_disk_reads["polled"] == 1 and stats.cache_hits["block_cache"] == hits + 1
        hits = stats.cache_hits["block_cache"]
        with open(path, "r+b") as f:  # one bit of chunk 2, on the disk
            f.seek(DATA_AT + 2 * BPC + 9)
            byte = f.read(1)[0]
            f.seek(DATA_AT + 2 * BPC + 9)
            f.write(bytes([byte ^ 0x01]))
        drop_pages(path)
        assert reads.read_now(block, 2 * BPC, 100, poll=True) is None
        assert stats.cache_hits["block_cache"] == hits and stats.block_cache_corrupt == 1
        got = await reads.read(KEY, len(BLOCK), 2 * BPC, 100, fetch, lambda: True)  # type: ignore[arg-type]
        assert got == BLOCK[2 * BPC : 2 * BPC + 100] and fetched == [1]
        assert stats.block_cache_corrupt == 1 and not path.exists()
        nursery.cancel_scope.cancel()
    cache.close()
