"""A persistent local cache of finalized block data that can never serve a stale byte.

Does file I/O (call it from worker threads); no sockets and no trio. A finalized block's bytes
are fixed by (block pool, block id, generation stamp): appends, truncates and recovery change the
generation stamp, and a replaced file has new block ids. So entries need no TTL, and several
mounts of one cluster may share a cache directory.

    DIR/hdfsfuse-cache-v1/<pool>/<block id>_<generation stamp>.data
        the block's bytes at their own offsets (a sparse file: only the chunks read are stored)
    DIR/hdfsfuse-cache-v1/<pool>/<block id>_<generation stamp>.sums
        +------+----+------+------+-----------+-----------+
        | HFCS | v1 | type | 0000 | bpc (u32) | len (u64) |   header, 20 bytes
        +------+----+------+------+-----------+-----------+
        | checksum of chunk 0 (BE32) | 'OK' 00 01 |             then 8 bytes per chunk;
        | checksum of chunk 1 (BE32) | 'OK' 00 01 |             zeros: not stored
        ...

A chunk's entry is written after its data, and every read verifies each chunk against its
entry with the block's own checksum (as a DataNode read is verified). A torn write, a truncated
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
import re
import shutil
import struct
import threading
from typing import NoReturn

from hdfsfuse.checksum import CHECKSUM_NULL, TYPE_NAMES, Checksum
from hdfsfuse.errors import ChecksumMismatch
from hdfsfuse.wire import ProtocolError

log = logging.getLogger(__name__)

SUBDIR = "hdfsfuse-cache-v1"
_HEADER = struct.Struct(">4sBBHIQ")
_MAGIC = b"HFCS"
_VERSION = 1
_ENTRY = 8
_PRESENT = b"OK\x00\x01"
_NAME = re.compile(r"(-?\d+)_(\d+)\.(data|sums)")
MIN_FREE = 64 * 1024 * 1024  # leave this much of the filesystem free when sizing the cache


@dataclasses.dataclass(frozen=True, slots=True)
class BlockKey:
    pool: str
    block_id: int
    generation_stamp: int

    def stem(self) -> str:
        return f"{self.block_id}_{self.generation_stamp}"


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
                    continue
                try:
                    st = e.stat()
                except OSError:
                    continue
                item = found.setdefault((pool.name, f"{m.group(1)}_{m.group(2)}"), [0.0, 0.0])
                item[0] += st.st_blocks * 512
                item[1] = max(item[1], st.st_mtime)
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
            self._unlink(pool, stem)

    # ----- lookups --------------------------------------------------------------------------------

    def read(self, key: BlockKey, block_length: int, offset: int, length: int) -> bytes | None:
        """Exactly [offset, offset+length) of a block, verified, or None when not all cached.

        Raises CacheCorrupt (after dropping the block) when stored bytes fail verification.
        """
        paths = self._paths(key)
        try:
            with open(paths[1], "rb", buffering=0) as sums_file:
                header = sums_file.read(_HEADER.size)
                checksum = self._checksum(header, block_length, key)
                bpc = checksum.bytes_per_checksum
                first, last = offset // bpc, (offset + length - 1) // bpc
                entries = os.pread(sums_file.fileno(), (last - first + 1) * _ENTRY, _HEADER.size + first * _ENTRY)
            if len(entries) < (last - first + 1) * _ENTRY:
                return None  # chunks past the last one stored
            view = memoryview(entries)
            if any(view[i + 4 : i + 8] != _PRESENT for i in range(0, len(entries), _ENTRY)):
                return None
            start = first * bpc
            end = min((last + 1) * bpc, block_length)
            with open(paths[0], "rb", buffering=0) as data_file:
                data = os.pread(data_file.fileno(), end - start, start)
        except FileNotFoundError:
            return None
        except CacheCorrupt:
            raise
        except OSError as e:
            self._error("reading", key, e)
            return None
        if len(data) != end - start:
            self._corrupt(key, f"data file ends at {start + len(data)}, before {end}")
        sums = b"".join(view[i : i + 4] for i in range(0, len(entries), _ENTRY))
        try:
            checksum.verify(memoryview(data), memoryview(sums), start, f"cached block {key.block_id}")
        except ChecksumMismatch as e:
            self._corrupt(key, str(e))
        self._touch(key)
        return data[offset - start : offset - start + length]

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
        data_path, sums_path = self._paths(key)
        try:
            os.makedirs(os.path.dirname(data_path), mode=0o700, exist_ok=True)
            fd = os.open(data_path, os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                os.pwrite(fd, data, chunk_offset)
                data_size = os.fstat(fd).st_blocks * 512
            finally:
                os.close(fd)
            fd = os.open(sums_path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                if os.fstat(fd).st_size < _HEADER.size:
                    os.pwrite(fd, _HEADER.pack(_MAGIC, _VERSION, checksum.kind, 0, bpc, block_length), 0)
                entries = b"".join(bytes(sums[i : i + 4]) + _PRESENT for i in range(0, len(sums), 4))
                os.pwrite(fd, entries, _HEADER.size + first * _ENTRY)  # after the data: see the module doc
                sums_size = os.fstat(fd).st_blocks * 512
            finally:
                os.close(fd)
        except OSError as e:
            self._error("storing", key, e)
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                self.evict_to(int(self._used * 0.75))  # the disk is full: shrink; reads go on from HDFS
            return
        with self._lock:
            k = (key.pool, key.stem())
            self._used += data_size + sums_size - self._sizes.pop(k, 0)
            self._sizes[k] = data_size + sums_size
        if self._used > self.capacity:
            self.evict_to(int(self.capacity * 0.9))

    # ----- helpers --------------------------------------------------------------------------------

    def _paths(self, key: BlockKey) -> tuple[str, str]:
        base = os.path.join(self.root, key.pool, key.stem())
        return base + ".data", base + ".sums"

    def _touch(self, key: BlockKey) -> None:
        with self._lock:
            k = (key.pool, key.stem())
            if k in self._sizes:
                self._sizes.move_to_end(k)

    def _corrupt(self, key: BlockKey, why: str) -> NoReturn:
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
        for suffix in (".sums", ".data"):  # the entries first: a half-removed block is a miss
            try:
                os.unlink(os.path.join(self.root, pool, stem + suffix))
            except FileNotFoundError:
                pass
            except OSError as e:
                log.warning("block cache: removing %s%s failed: %s", stem, suffix, e.strerror or e)

