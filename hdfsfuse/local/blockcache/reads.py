"""Reads through the persistent block cache, over trio (the cache itself is `hdfsfuse.local.blockcache.store`).

    read_now(block, offset, length)    the hot path: a small hit in memory, inline, or None
      poll=True (the mount's only read)  bytes only on disk: polled for until they land, inline
    read(key, offset, length, fetch)
      -> cache lookup: verified bytes, or a miss
      -> miss: one fetch per (block, range) at a time; readers of the same range wait for it
      -> the fetched chunks (verified, chunk-aligned) are stored in the background, in a thread

The trio loop only reads cache files that are open already, and only bytes the kernel holds in
memory (RWF_NOWAIT: it cannot wait for a disk). A RWF_NOWAIT read that misses starts the disk
read. When the mount has no other read waiting (`poll`), `read_now` then tries again and again,
inline, until the bytes have landed, for at most POLL_NS: the loop has nothing else to do, and
the disk's interrupt unlocks the page with no thread to wake, where a reader parked in epoll
must be woken, and on a virtual machine waking a halted CPU costs tens of microseconds. A
lookup that takes longer goes the usual way.

Otherwise a `read_now` whose bytes are only on disk has asked the kernel to read them in;
`read`, reached after the caller's awaits, tries memory once more, and often finds them there.
The rest wait for the disk through
io_uring, the flags, checksums and data read at once (hdfsfuse.local.uring: no thread hop; a large
lookup's data with O_DIRECT), or, where the kernel has no io_uring, in worker threads, as do
lookups that must open a block's files. Stores that fall behind are dropped, not queued without
bound: a cache is an optimisation, and a read never waits for one.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable

import trio

from hdfsfuse.datanode import dtp
from hdfsfuse.datanode.context import BlockKey, Fetch
from hdfsfuse.local.blockcache.layout import RECHECK, CacheCorrupt, Recheck
from hdfsfuse.local.blockcache.store import BlockCache
from hdfsfuse.local.io_threads import LocalIoThreads
from hdfsfuse.local.uring import RingClosed
from hdfsfuse.local.verified_io import WouldBlock
from hdfsfuse.proto import hdfs_pb2
from hdfsfuse.stats import Stats

log = logging.getLogger(__name__)

MAX_PENDING_STORE_BYTES = 64 * 1024 * 1024
NOWAIT_MAX = 128 * 1024  # larger lookups verify in a thread even when their bytes are in memory
RESCAN_SECONDS = 30.0
POLL_NS = 250_000  # how long an inline lookup polls for the disk: a cold 4 KiB read here takes ~50 us



@dataclasses.dataclass(slots=True)
class _Flight:
    done: trio.Event = dataclasses.field(default_factory=trio.Event)
    data: bytes | bytearray | None = None


class CachedReads:
    """The block cache of one client: lookups, single-flight fills, background stores."""

    def __init__(self, cache: BlockCache, stats: Stats, nursery: trio.Nursery, local_io: LocalIoThreads) -> None:
        self.cache = cache
        self.stats = stats
        self._nursery = nursery
        self._flights: dict[tuple[BlockKey, int, int], _Flight] = {}
        self._local_io = local_io  # lookups: latency counts
        self._threads = trio.CapacityLimiter(4)  # stores and rescans: in the background
        self._pending = 0  # bytes waiting to be stored

    def read_now(self, block: hdfs_pb2.ExtendedBlockProto, offset: int, length: int, *,
                 poll: bool = False) -> bytes | bytearray | None:
        """A small read of a finalized block that the cache holds in files already open and the
        kernel holds in memory: looked up inline, with no await and no thread hop. None sends
        the caller to `read` (a miss, a disk to wait for, a corrupt entry), which handles it,
        and which reopens the block's files after a miss (so this lookup leaves them open).
        `poll` (the caller has nothing else to do meanwhile): bytes only on disk are polled
        for, for up to POLL_NS, before giving up."""
        if length > NOWAIT_MAX:
            return None
        key = BlockKey.of(block)
        try:
            try:
                data = self.cache.read(key, block.numBytes, offset, length, nowait=True, reopen_on_miss=False)
            except WouldBlock:
                if not poll:
                    return None
                data = self._poll(key, block.numBytes, offset, length)
        except CacheCorrupt:
            self._sync_counters()
            return None
        if data is None:
            return None
        self.stats.cache_hits["block_cache"] += 1
        self.stats.block_cache_served_bytes += len(data)
        return data

    def _poll(self, key: BlockKey, block_length: int, offset: int, length: int) -> bytes | bytearray | None:
        """The lookup again and again, RWF_NOWAIT, with no await, until the disk read the first
        try started has landed (the page is unlocked from the disk's interrupt: nothing has to
        wake this thread), or POLL_NS pass (None). Raises CacheCorrupt."""
        if not self.cache.is_open(key):  # the first try had no files to read: opening them is a thread's
            return None
        deadline = time.monotonic_ns() + POLL_NS
        while time.monotonic_ns() < deadline:
            try:
                data = self.cache.read(key, block_length, offset, length, nowait=True, reopen_on_miss=False,
                                       read_in=False)
            except WouldBlock:
                continue
            if data is not None:
                self.stats.local_disk_reads["polled"] += 1
            return data
        return None

    async def read(self, key: BlockKey, block_length: int, offset: int, length: int, fetch: Fetch,
                   still_current: Callable[[], bool]) -> bytes | bytearray | None:
        """The range from the cache, else from `fetch` (which may return None: the read failed).

        `still_current()` says, after a fetch, whether the block is still `key` (a refetch of
        locations may have moved it on); only then are the fetched chunks stored under `key`.
        """
        data = await self._lookup(key, block_length, offset, length)
        if data is not None:
            return data
        flight_key = (key, offset, length)
        flight = self._flights.get(flight_key)
        if flight is not None:  # another reader is fetching exactly this: share its bytes
            await flight.done.wait()
            if flight.data is not None:
                return flight.data
        flight = self._flights[flight_key] = _Flight()
        kept: list[dtp.ReadBlockParser] = []
        try:
            flight.data = await fetch(kept)
        finally:
            flight.done.set()
            del self._flights[flight_key]
        if flight.data is not None and kept and still_current():
            self._store_later(key, block_length, kept[0])
        return flight.data

    async def _lookup(self, key: BlockKey, block_length: int, offset: int, length: int) -> bytes | bytearray | None:
        data: bytes | bytearray | None = None
        try:
            try:
                if length > NOWAIT_MAX:
                    raise WouldBlock
                # Small reads of bytes the kernel already holds: no thread hop (nothing can wait).
                data = self.cache.read(key, block_length, offset, length, nowait=True)
            except WouldBlock:
                got = await self._through_ring(key, block_length, offset, length)
                if got is RECHECK:
                    self.stats.local_disk_reads["thread"] += 1
                    got = await self._local_io.run(self.cache.read, key, block_length, offset, length)
                else:
                    self.stats.local_disk_reads["io_uring"] += 1
                data = got
        except CacheCorrupt:
            data = None
        self._sync_counters()
        if data is None:
            self.stats.cache_misses["block_cache"] += 1
            return None
        self.stats.cache_hits["block_cache"] += 1
        self.stats.block_cache_served_bytes += len(data)
        return data

    async def _through_ring(self, key: BlockKey, block_length: int, offset: int,
                            length: int) -> bytes | bytearray | Recheck | None:
        """A lookup that waits for the disk, its preads done at once through io_uring (no
        worker thread; a large one's data with O_DIRECT); RECHECK when that cannot tell (the
        block's files are not open, no ring, bytes that did not verify), for `BlockCache.read`
        in a thread to decide."""
        ring = self._local_io.ring
        if not ring.available:
            return RECHECK
        try:
            lookup = self.cache.begin_lookup(key, block_length, offset, length)
        except WouldBlock:
            return RECHECK
        try:
            got: list[int] | OSError = await ring.pread_into(lookup.reads)
        except RingClosed:
            self.cache.abandon_lookup(lookup)
            return RECHECK
        except OSError as e:
            got = e
        except BaseException:
            self.cache.abandon_lookup(lookup)
            raise
        return self.cache.finish_lookup(lookup, got)

    def _store_later(self, key: BlockKey, block_length: int, parser: dtp.ReadBlockParser) -> None:
        size = len(parser.kept_data)
        if parser.checksum is None or self._pending + size > MAX_PENDING_STORE_BYTES:
            return
        self._pending += size
        self._nursery.start_soon(self._store, key, block_length, parser)

    async def _store(self, key: BlockKey, block_length: int, parser: dtp.ReadBlockParser) -> None:
        size = len(parser.kept_data)
        try:
            await trio.to_thread.run_sync(
                self.cache.store, key, block_length, parser.checksum, parser.chunk_offset,
                parser.kept_data, parser.kept_sums, limiter=self._threads)
            self.stats.block_cache_stored_bytes += size
        except Exception as e:  # a background task: log, never escape
            log.error("block cache: storing block %d failed: %s: %s", key.block_id, type(e).__name__, e)
        finally:
            self._pending -= size
            self._sync_counters()

    async def rescan_forever(self) -> None:
        """See what other mounts sharing the directory added or removed; keep within the size."""
        while True:
            await trio.sleep(RESCAN_SECONDS)
            try:
                await trio.to_thread.run_sync(self._rescan, limiter=self._threads)
            except Exception as e:  # a background task: log, never escape
                log.error("block cache: rescanning %s failed: %s: %s", self.cache.root, type(e).__name__, e)

    def _rescan(self) -> None:
        self.cache.rescan()
        self.cache.evict_to(self.cache.capacity)

    def _sync_counters(self) -> None:
        c = self.cache.counters
        s = self.stats
        s.block_cache_evictions, s.block_cache_corrupt, s.block_cache_errors = c.evictions, c.corrupt, c.errors
        s.block_cache_used_bytes = self.cache.used
