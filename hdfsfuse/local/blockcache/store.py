"""A persistent local cache of finalized block data that can never serve a stale byte.

Does file I/O (call it from worker threads); no sockets and no trio. A finalized block's bytes
are fixed by (block pool, block id, generation stamp): appends, truncates and recovery change the
generation stamp, and a replaced file has new block ids. So entries need no TTL, and several
mounts of one cluster may share a cache directory.

The file format is `hdfsfuse.local.blockcache.layout`.

One file (one inode) per block: a lookup that opened it sees one consistent file even while
another mount evicts and refills the block. The file appears by a link of a complete header,
so nobody sees it half made. A chunk's checksum and then its flag are written after its data,
and every read verifies each chunk against its checksum with the block's own scheme (as a
DataNode read is verified). A torn write, a truncated
or bit-flipped file, or a crash between the two writes is found by that check: the block's files
are dropped (counted as corruption) and the read goes to HDFS. Nothing unverified is returned.

Size: the bytes on disk of every block, kept under `capacity` by dropping least-recently-used
blocks. Other mounts sharing the directory are seen by a periodic rescan. A full disk shrinks
the cache; reads carry on from HDFS.
"""

from __future__ import annotations

import collections
import dataclasses
import errno
import logging
import os
import shutil
import threading
from typing import NoReturn

from hdfsfuse.datanode.checksum import CHECKSUM_NULL, Checksum
from hdfsfuse.datanode.context import BlockKey
from hdfsfuse.errors import ChecksumMismatch
from hdfsfuse.local.blockcache.layout import (
    HEADER,
    PRESENT,
    RECHECK,
    SUBDIR,
    BadHeader,
    CacheCorrupt,
    Lookup,
    OpenBlock,
    Recheck,
    advise_reads,
    block_path,
    parse_header,
    scan,
    unlink,
    write_chunks,
)
from hdfsfuse.local.verified_io import (
    DIRECT_MIN,
    ShortRead,
    WouldBlock,
    chunk_span,
    direct_buffer,
    open_direct,
    pread_nowait,
    read_verified,
    read_verified_direct,
    verified,
)

log = logging.getLogger(__name__)

MAX_OPEN_BLOCKS = 128  # blocks whose files lookups keep open
SEQUENTIAL_CHUNKS = 2048  # a lookup of 1 MiB (of 512-byte chunks) or more is a sequential reader's
MIN_FREE = 64 * 1024 * 1024  # leave this much of the filesystem free when sizing the cache



@dataclasses.dataclass(slots=True)
class CacheCounters:
    evictions: int = 0
    corrupt: int = 0
    errors: int = 0  # I/O errors (a full disk, permissions) that disabled one store or lookup


class BlockCache:
    """The cache directory of one mount (thread-safe: lookups and stores run in worker threads)."""

    def __init__(self, directory: str, capacity: int) -> None:
        self.root = os.path.join(os.path.abspath(directory), SUBDIR)
        self.capacity = capacity
        self.counters = CacheCounters()
        self._lock = threading.Lock()
        self._sizes: collections.OrderedDict[tuple[str, str], int] = collections.OrderedDict()  # LRU first
        self._used = 0
        self._open: collections.OrderedDict[tuple[str, str], OpenBlock] = collections.OrderedDict()

    # ----- start-up and size ----------------------------------------------------------------------

    def open(self) -> None:
        """Create the directory, size the cache to the filesystem, load what is there, evict down."""
        try:
            os.makedirs(self.root, mode=0o700, exist_ok=True)
            probe = os.path.join(self.root, f".probe-{os.getpid()}")
            with open(probe, "wb"):
                pass
            os.unlink(probe)
        except OSError as e:
            raise OSError(e.errno, f"cache_dir {os.path.dirname(self.root)} is not usable: {e.strerror}") from None
        self.rescan()
        usage = shutil.disk_usage(self.root)
        room = self._used + usage.free - MIN_FREE
        if self.capacity > room:
            log.warning("cache_size %d does not fit on the filesystem of %s (%d bytes free): using %d bytes",
                        self.capacity, os.path.dirname(self.root), usage.free, max(room, 0))
            self.capacity = max(room, 0)
        self.evict_to(self.capacity)

    def rescan(self) -> None:
        """Rebuild the size index from the directory (other mounts may share it), oldest first."""
        found = scan(self.root)
        with self._lock:
            recent = {k: i for i, k in enumerate(self._sizes)}  # what this mount used lately stays newest
            order = sorted(found, key=lambda k: (k in recent, recent.get(k, 0), found[k][1]))
            self._sizes = collections.OrderedDict((k, found[k][0]) for k in order)
            self._used = sum(self._sizes.values())

    @property
    def used(self) -> int:
        return self._used

    def evict_to(self, target: int) -> None:
        """Drop least-recently-used blocks until the cache holds at most `target` bytes."""
        while True:
            with self._lock:
                if self._used <= target or not self._sizes:
                    return
                (pool, stem), size = self._sizes.popitem(last=False)
                self._used -= size
                self.counters.evictions += 1
                block = self._open.pop((pool, stem), None)
                if block is not None:
                    self._doom(block)
            unlink(self.root, pool, stem)

    # ----- lookups --------------------------------------------------------------------------------

    def read(self, key: BlockKey, block_length: int, offset: int, length: int, *,
             nowait: bool = False, reopen_on_miss: bool = True, read_in: bool = True) -> bytes | bytearray | None:
        """Exactly [offset, offset+length) of a block, verified, or None when not all cached.

        Raises CacheCorrupt (after dropping the block) when stored bytes fail verification.
        `nowait`: only from files already open and bytes already in the kernel's page cache
        (RWF_NOWAIT), so the caller's thread never waits for a disk; raises WouldBlock otherwise.
        `reopen_on_miss`: a miss closes the block's files, so the next lookup opens its path again
        (another mount may have replaced the file); False for a lookup that another one follows.
        `read_in`: before raising WouldBlock, ask the kernel to start reading the bytes in (and
        the block's checksums); False for a caller retrying at once, whose first try asked.
        """
        try:
            block = self._acquire(key, block_length, open_files=not nowait)
        except OSError as e:
            self._error("opening", key, e)
            return None
        if block is None:
            return None
        try:
            bpc = block.checksum.bytes_per_checksum
            first, count, start, end = chunk_span(offset, length, bpc, block_length)
            flags_at, data_at = block.layout
            what = f"cached block {key.block_id}"
            # A large lookup (a sequential reader's) reads its bytes with O_DIRECT: no copy out of
            # the page cache, and no second copy of them there beside the mount's own pages.
            direct = not nowait and end - start > DIRECT_MIN and self._direct_fd(block) >= 0
            try:
                if not nowait:
                    advise_reads(block, data_at + start, end - start, data=not direct)
                flags = (pread_nowait if nowait else os.pread)(block.fd, count, flags_at + first)
                if flags.count(PRESENT) != count:
                    if reopen_on_miss:
                        self._forget(key)  # another mount may have replaced the file: reopen next time
                    return None
                if direct:
                    data = read_verified_direct(block.direct_fd, block.fd, data_at, block.fd, HEADER.size,
                                                block.checksum, block_length, offset, length, what)
                else:
                    if count >= SEQUENTIAL_CHUNKS and end < block_length:
                        # A readahead-sized lookup: a sequential reader. Have the kernel read the
                        # next range in the background, so the next lookup finds it in memory.
                        ahead = min(end - start, block_length - end)
                        os.posix_fadvise(block.fd, data_at + end, ahead, os.POSIX_FADV_WILLNEED)
                    data = read_verified(block.fd, data_at, block.fd, HEADER.size, block.checksum, block_length,
                                         offset, length, what, nowait=nowait)
            except WouldBlock:
                if read_in:
                    advise_reads(block, data_at + start, end - start)
                raise
            except ShortRead:
                self._corrupt(key, f"files end before block offset {end}")
            except ChecksumMismatch as e:
                self._corrupt(key, str(e))
            except OSError as e:
                self._forget(key)
                self._error("reading", key, e)
                return None
        finally:
            self._release(block)
        self._touch(key)
        return data

    def begin_lookup(self, key: BlockKey, block_length: int, offset: int, length: int) -> Lookup:
        """A lookup whose preads are done elsewhere (hdfsfuse.local.uring, concurrently) into the
        buffers it gives: the block's open files, taken until `finish_lookup`. A large lookup
        reads its data through the block's O_DIRECT open (as `read` does), into an aligned
        buffer. Raises WouldBlock when the files are not open (then `read`, in a worker thread,
        opens them) and CacheCorrupt as `read` does."""
        block = self._acquire(key, block_length, open_files=False)
        assert block is not None
        first, count, start, end = chunk_span(offset, length, block.checksum.bytes_per_checksum, block_length)
        flags_at, data_at = block.layout
        n = end - start
        direct_data = direct_buffer(data_at + start, n) if n > DIRECT_MIN and self._direct_fd(block) >= 0 else None
        direct = direct_data is not None
        data = direct_data if direct_data is not None else bytearray(n)
        advise_reads(block, 0, 0, data=False)  # the block's checksums and flags, for its later lookups
        reads = [(block.direct_fd if direct else block.fd, data, data_at + start),
                 (block.fd, bytearray(4 * count), HEADER.size + 4 * first),
                 (block.fd, bytearray(count), flags_at + first)]
        return Lookup(key, block, offset, length, reads, count, direct)

    def finish_lookup(self, lookup: Lookup, got: list[int] | OSError) -> bytes | bytearray | Recheck | None:
        """The verified bytes of a lookup from `begin_lookup`, given how many bytes each of its
        preads read (data, checksums, flags), or None for a miss. RECHECK: `read` must tell,
        reading in order: bytes that did not verify (a store writes a chunk's data, then its
        checksum, then its flag, so `read`, which reads the flags first, never sees a flag
        before its data; reads done at once may, with a store racing the lookup, so a mismatch
        here proves nothing yet), or a direct read that failed or came up short."""
        key, block = lookup.key, lookup.block
        try:
            if isinstance(got, OSError):
                if lookup.direct:
                    return RECHECK  # the filesystem may refuse O_DIRECT here: `read` falls back
                self._forget(key)
                self._error("reading", key, got)
                return None
            (_, data, _), (_, sums, _), (_, flags, _) = lookup.reads
            _, _, start, end = chunk_span(lookup.offset, lookup.length, block.checksum.bytes_per_checksum,
                                          block.block_length)
            del data[min(got[0], end - start) :], sums[got[1] :], flags[got[2] :]
            if len(flags) != lookup.chunks or flags.count(PRESENT) != len(flags):
                self._forget(key)  # another mount may have replaced the file: reopen next time
                return None
            try:  # short bytes (ShortRead) or a mismatch
                out = verified(data, sums, block.checksum, block.block_length, lookup.offset, lookup.length,
                               f"cached block {key.block_id}")
            except (ShortRead, ChecksumMismatch):
                return RECHECK
        finally:
            self._release(block)
        self._touch(key)
        return out

    def abandon_lookup(self, lookup: Lookup) -> None:
        """End a lookup from `begin_lookup` whose reader went away (cancelled)."""
        self._release(lookup.block)

    def is_open(self, key: BlockKey) -> bool:
        """Whether lookups keep the block's files open (a `nowait` lookup can read them)."""
        return (key.pool, key.stem()) in self._open

    def _acquire(self, key: BlockKey, block_length: int, open_files: bool = True) -> OpenBlock | None:
        """The block's open files, in use until `_release`; None when it is not cached.

        Without `open_files`, only a block already open is taken (WouldBlock otherwise).
        """
        k = (key.pool, key.stem())
        with self._lock:
            block = self._open.get(k)
            if block is not None:
                self._open.move_to_end(k)
                block.users += 1
        if block is not None:
            if block.block_length != block_length:
                self._release(block)
                self._corrupt(key, f"block length {block.block_length}, expected {block_length}")
            return block
        if not open_files:
            raise WouldBlock
        try:
            fd = os.open(self._path(key), os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            # Lookups read exactly what they need (a 4 KiB read stays 4 KiB on the disk): no
            # kernel readahead on top, which would read 128 KiB for each random read.
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
            checksum = parse_header(os.pread(fd, HEADER.size, 0), block_length)
        except BadHeader as e:
            os.close(fd)
            self._corrupt(key, str(e))
        except BaseException:
            os.close(fd)
            raise
        block = OpenBlock(fd, checksum, block_length, users=1)
        with self._lock:
            dropped = [self._open.pop(k)] if k in self._open else []
            self._open[k] = block
            while len(self._open) > MAX_OPEN_BLOCKS:
                dropped.append(self._open.popitem(last=False)[1])
            for b in dropped:
                self._doom(b)
        return block

    def _direct_fd(self, block: OpenBlock) -> int:
        """The block's O_DIRECT open (made once, of the same inode as its fd), or -1."""
        if block.direct_fd == -2:
            with self._lock:
                if block.direct_fd == -2:
                    block.direct_fd = open_direct(block.fd)
        return block.direct_fd

    def _release(self, block: OpenBlock) -> None:
        with self._lock:
            block.users -= 1
            if block.doomed and block.users == 0:
                block.close()

    def _doom(self, block: OpenBlock) -> None:
        """Close a block's files once no lookup uses them (call with the lock held)."""
        block.doomed = True
        if block.users == 0:
            block.close()

    def _forget(self, key: BlockKey) -> None:
        with self._lock:
            block = self._open.pop((key.pool, key.stem()), None)
            if block is not None:
                self._doom(block)

    def close(self) -> None:
        """Close every file lookups keep open (once they finish)."""
        with self._lock:
            for block in self._open.values():
                self._doom(block)
            self._open.clear()

    # ----- stores ---------------------------------------------------------------------------------

    def store(self, key: BlockKey, block_length: int, checksum: Checksum, chunk_offset: int,
              data: bytes | bytearray, sums: bytes | bytearray) -> None:
        """Keep verified chunks [chunk_offset, +len(data)) of a block with their checksums.

        `chunk_offset` is chunk-aligned and `data` ends at a chunk boundary or the block's end;
        `sums` holds one checksum per chunk, as the DataNode sent it.
        """
        if checksum.kind == CHECKSUM_NULL or not data:
            return
        bpc = checksum.bytes_per_checksum
        count = -(-len(data) // bpc)
        if chunk_offset % bpc or len(sums) != count * 4 or chunk_offset + len(data) > block_length:
            raise ValueError("a cache store needs whole chunks and one checksum per chunk")
        try:
            size = write_chunks(self._path(key), block_length, checksum, chunk_offset, data, sums)
        except OSError as e:
            self._error("storing", key, e)
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                self.evict_to(int(self._used * 0.75))  # the disk is full: shrink; reads go on from HDFS
            return
        with self._lock:
            k = (key.pool, key.stem())
            self._used += size - self._sizes.pop(k, 0)
            self._sizes[k] = size
        if self._used > self.capacity:
            self.evict_to(int(self.capacity * 0.9))

    # ----- helpers --------------------------------------------------------------------------------

    def _path(self, key: BlockKey) -> str:
        return block_path(self.root, key)

    def _touch(self, key: BlockKey) -> None:
        with self._lock:
            k = (key.pool, key.stem())
            if k in self._sizes:
                self._sizes.move_to_end(k)

    def _corrupt(self, key: BlockKey, why: str) -> NoReturn:
        self._forget(key)
        with self._lock:
            self.counters.corrupt += 1
            self._used -= self._sizes.pop((key.pool, key.stem()), 0)
        log.warning("block cache: block %d (generation %d) failed verification (%s); dropped it, reading from "
                    "HDFS", key.block_id, key.generation_stamp, why)
        unlink(self.root, key.pool, key.stem())
        raise CacheCorrupt(why)

    def _error(self, doing: str, key: BlockKey, e: OSError) -> None:
        with self._lock:
            self.counters.errors += 1
        log.warning("block cache: %s block %d failed: %s", doing, key.block_id, e.strerror or e)
