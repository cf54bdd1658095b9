"""A persistent local cache of finalized block data that can never serve a stale byte.

Does file I/O (call it from worker threads); no sockets and no trio. A finalized block's bytes
are fixed by (block pool, block id, generation stamp): appends, truncates and recovery change the
generation stamp, and a replaced file has new block ids. So entries need no TTL, and several
mounts of one cluster may share a cache directory.

    DIR/hdfsfuse-cache-v1/<pool>/<block id>_<generation stamp>.blk, one sparse file per block:
        +------+----+------+------+-----------+-----------+
        | HFCS | v1 | type | 0000 | bpc (u32) | len (u64) |   header, 20 bytes
        +------+----+------+------+-----------+-----------+
        | checksum of chunk 0 .. N-1 (BE32 each)         |   N = chunks in the block
        +------------------------------------------------+
        | 01 if chunk i is stored, one byte per chunk    |   00 (a hole): not stored
        +------------------------------------------------+ (padding to 4 KiB)
        | the block's bytes at their own offsets          |   only the chunks read are stored
        +------------------------------------------------+

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
import enum
import errno
import logging
import os
import re
import shutil
import struct
import threading
import time
from typing import NoReturn

from hdfsfuse.datanode.checksum import CHECKSUM_NULL, TYPE_NAMES, Checksum
from hdfsfuse.datanode.context import BlockKey
from hdfsfuse.errors import ChecksumMismatch, ProtocolError
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

SUBDIR = "hdfsfuse-cache-v1"
_HEADER = struct.Struct(">4sBBHIQ")
_MAGIC = b"HFCS"
_VERSION = 1
_PRESENT = 1
MAX_OPEN_BLOCKS = 128  # blocks whose files lookups keep open
SEQUENTIAL_CHUNKS = 2048  # a lookup of 1 MiB (of 512-byte chunks) or more is a sequential reader's
_NAME = re.compile(r"(-?\d+)_(\d+)\.blk")
_PAGE = 4096
MIN_FREE = 64 * 1024 * 1024  # leave this much of the filesystem free when sizing the cache
META_ADVICE_SECONDS = 1.0  # how often a block's checksums and flags may be asked into memory


@dataclasses.dataclass(slots=True)
class _OpenBlock:
    """A cached block's open files, shared by lookups in several threads.

    Closed only once no lookup uses it (`users`), so a descriptor is never reused for another
    file under a lookup's feet. Changed under `BlockCache._lock` only.
    """

    fd: int
    checksum: Checksum
    block_length: int
    users: int = 0
    doomed: bool = False
    direct_fd: int = -2  # the file opened again with O_DIRECT, for large lookups; -1: refused; -2: not yet
    checksums_advised: float = -META_ADVICE_SECONDS  # when the kernel was last asked to read them in

    @property
    def layout(self) -> tuple[int, int]:
        return _layout(self.block_length, self.checksum.bytes_per_checksum)

    def close(self) -> None:
        for fd in (self.fd, self.direct_fd):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass


def _layout(block_length: int, bpc: int) -> tuple[int, int]:
    """(where the flags start, where the block's bytes start) in a block's cache file."""
    chunks = -(-block_length // bpc)
    flags_at = _HEADER.size + 4 * chunks
    return flags_at, -(-(flags_at + chunks) // _PAGE) * _PAGE


def _read_in(block: _OpenBlock, data_offset: int, data_length: int, *, data: bool = True) -> None:
    """Start the disk reads a lookup needs, all at once: its data, and the block's checksums and
    flags (all of them, so its later lookups find them in memory). A lookup that must wait then
    waits for one disk read, not three in a row; the trio loop calls this before it hands the
    lookup to a thread, so the disk works during the hand-over. The checksums are asked for at
    most once a second per block: when they are in memory already, asking costs a walk of the
    page cache. Advice that fails is only advice: the reads that follow tell. Without `data`,
    only the checksums and flags (a direct read of the data follows, past the page cache)."""
    try:
        if data:
            os.posix_fadvise(block.fd, data_offset, data_length, os.POSIX_FADV_WILLNEED)
        now = time.monotonic()
        if now - block.checksums_advised >= META_ADVICE_SECONDS:
            block.checksums_advised = now
            _, data_at = block.layout
            os.posix_fadvise(block.fd, _HEADER.size, data_at - _HEADER.size, os.POSIX_FADV_WILLNEED)
    except OSError:
        pass


@dataclasses.dataclass(frozen=True, slots=True)
class Lookup:
    """A lookup begun by `BlockCache.begin_lookup`: its block, range and preads."""

    key: BlockKey
    block: _OpenBlock
    offset: int
    length: int
    reads: list[tuple[int, bytearray, int]]  # (fd, buffer, file offset): the data, its checksums, its flags
    chunks: int  # how many the lookup covers (one flag byte each)
    direct: bool  # the data through the block's O_DIRECT open, into an aligned buffer


class Recheck(enum.Enum):
    RECHECK = "recheck"


RECHECK = Recheck.RECHECK


class CacheCorrupt(Exception):
    """A cached block failed verification; its files were dropped."""


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
        self._open: collections.OrderedDict[tuple[str, str], _OpenBlock] = collections.OrderedDict()

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
        found: dict[tuple[str, str], list[float]] = {}
        try:
            pools = [e for e in os.scandir(self.root) if e.is_dir()]
        except OSError:
            return
        for pool in pools:
            try:
                entries = list(os.scandir(pool.path))
            except OSError:
                continue
            for e in entries:
                m = _NAME.fullmatch(e.name)
                if m is None:
                    _remove_stale_temporary(e)
                    continue
                try:
                    st = e.stat()
                except OSError:
                    continue
                found[(pool.name, f"{m.group(1)}_{m.group(2)}")] = [st.st_blocks * 512, st.st_mtime]
        with self._lock:
            recent = {k: i for i, k in enumerate(self._sizes)}  # what this mount used lately stays newest
            order = sorted(found, key=lambda k: (k in recent, recent.get(k, 0), found[k][1]))
            self._sizes = collections.OrderedDict((k, int(found[k][0])) for k in order)
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
            self._unlink(pool, stem)

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
                    _read_in(block, data_at + start, end - start, data=not direct)
                flags = (pread_nowait if nowait else os.pread)(block.fd, count, flags_at + first)
                if flags.count(_PRESENT) != count:
                    if reopen_on_miss:
                        self._forget(key)  # another mount may have replaced the file: reopen next time
                    return None
                if direct:
                    data = read_verified_direct(block.direct_fd, block.fd, data_at, block.fd, _HEADER.size,
                                                block.checksum, block_length, offset, length, what)
                else:
                    if count >= SEQUENTIAL_CHUNKS and end < block_length:
                        # A readahead-sized lookup: a sequential reader. Have the kernel read the
                        # next range in the background, so the next lookup finds it in memory.
                        ahead = min(end - start, block_length - end)
                        os.posix_fadvise(block.fd, data_at + end, ahead, os.POSIX_FADV_WILLNEED)
                    data = read_verified(block.fd, data_at, block.fd, _HEADER.size, block.checksum, block_length,
                                         offset, length, what, nowait=nowait)
            except WouldBlock:
                if read_in:
                    _read_in(block, data_at + start, end - start)
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
        _read_in(block, 0, 0, data=False)  # the block's checksums and flags, for its later lookups
        reads = [(block.direct_fd if direct else block.fd, data, data_at + start),
                 (block.fd, bytearray(4 * count), _HEADER.size + 4 * first),
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
            if len(flags) != lookup.chunks or flags.count(_PRESENT) != len(flags):
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

    def _acquire(self, key: BlockKey, block_length: int, open_files: bool = True) -> _OpenBlock | None:
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
            checksum = self._checksum(os.pread(fd, _HEADER.size, 0), block_length, key)
        except BaseException:
            os.close(fd)
            raise
        block = _OpenBlock(fd, checksum, block_length, users=1)
        with self._lock:
            dropped = [self._open.pop(k)] if k in self._open else []
            self._open[k] = block
            while len(self._open) > MAX_OPEN_BLOCKS:
                dropped.append(self._open.popitem(last=False)[1])
            for b in dropped:
                self._doom(b)
        return block

    def _direct_fd(self, block: _OpenBlock) -> int:
        """The block's O_DIRECT open (made once, of the same inode as its fd), or -1."""
        if block.direct_fd == -2:
            with self._lock:
                if block.direct_fd == -2:
                    block.direct_fd = open_direct(block.fd)
        return block.direct_fd

    def _release(self, block: _OpenBlock) -> None:
        with self._lock:
            block.users -= 1
            if block.doomed and block.users == 0:
                block.close()

    def _doom(self, block: _OpenBlock) -> None:
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

    def _checksum(self, header: bytes, block_length: int, key: BlockKey) -> Checksum:
        if len(header) < _HEADER.size:
            self._corrupt(key, "short header")
        magic, version, kind, _, bpc, stored_length = _HEADER.unpack(header)
        if magic != _MAGIC or version != _VERSION or kind not in TYPE_NAMES or kind == CHECKSUM_NULL:
            self._corrupt(key, "bad header")
        if stored_length != block_length:
            self._corrupt(key, f"block length {stored_length}, expected {block_length}")
        try:
            return Checksum.of(kind, bpc)
        except ProtocolError:
            self._corrupt(key, f"bad bytes per checksum {bpc}")

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
        first = chunk_offset // bpc
        count = -(-len(data) // bpc)
        if chunk_offset % bpc or len(sums) != count * 4 or chunk_offset + len(data) > block_length:
            raise ValueError("a cache store needs whole chunks and one checksum per chunk")
        path = self._path(key)
        flags_at, data_at = _layout(block_length, bpc)
        try:
            fd = self._open_for_store(path, checksum, block_length)
            try:
                # The data, then the checksums, then the flags: see the module doc.
                os.pwrite(fd, data, data_at + chunk_offset)
                os.pwrite(fd, sums, _HEADER.size + 4 * first)
                os.pwrite(fd, bytes([_PRESENT]) * count, flags_at + first)
                size = os.fstat(fd).st_blocks * 512
            finally:
                os.close(fd)
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
        return os.path.join(self.root, key.pool, key.stem() + ".blk")

    @staticmethod
    def _open_for_store(path: str, checksum: Checksum, block_length: int) -> int:
        """The block's file for writing; a new one appears (by a link) with its header complete."""
        try:
            return os.open(path, os.O_WRONLY)
        except FileNotFoundError:
            pass
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            header = _HEADER.pack(_MAGIC, _VERSION, checksum.kind, 0, checksum.bytes_per_checksum, block_length)
            os.pwrite(fd, header, 0)
            try:
                os.link(tmp, path)
            except FileExistsError:  # another thread or mount made it first: use theirs
                os.close(fd)
                fd = os.open(path, os.O_WRONLY)
        except BaseException:
            os.close(fd)
            raise
        finally:
            os.unlink(tmp)
        return fd

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
        self._unlink(key.pool, key.stem())
        raise CacheCorrupt(why)

    def _error(self, doing: str, key: BlockKey, e: OSError) -> None:
        with self._lock:
            self.counters.errors += 1
        log.warning("block cache: %s block %d failed: %s", doing, key.block_id, e.strerror or e)

    def _unlink(self, pool: str, stem: str) -> None:
        try:
            os.unlink(os.path.join(self.root, pool, stem + ".blk"))
        except FileNotFoundError:
            pass
        except OSError as e:
            log.warning("block cache: removing %s.blk failed: %s", stem, e.strerror or e)


def _remove_stale_temporary(entry: os.DirEntry[str]) -> None:
    """A header file left by a store that crashed before linking it into place."""
    try:
        if entry.name.endswith(".tmp") and entry.stat().st_mtime < time.time() - 600:
            os.unlink(entry.path)
    except OSError:
        pass
