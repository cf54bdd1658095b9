"""The block cache's file format: one sparse file per block, its header, checksums, flags and bytes.

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

A file appears by a link of a complete header, so nobody sees it half made. A chunk's data is
written first, then its checksum, then its flag. Does file I/O (from worker threads); no trio.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import os
import re
import struct
import threading
import time

from hdfsfuse.datanode.checksum import CHECKSUM_NULL, TYPE_NAMES, Checksum
from hdfsfuse.datanode.context import BlockKey
from hdfsfuse.errors import ProtocolError

log = logging.getLogger(__name__)

SUBDIR = "hdfsfuse-cache-v1"
HEADER = struct.Struct(">4sBBHIQ")
MAGIC = b"HFCS"
VERSION = 1
PRESENT = 1
NAME = re.compile(r"(-?\d+)_(\d+)\.blk")
PAGE = 4096
META_ADVICE_SECONDS = 1.0  # how often a block's checksums and flags may be asked into memory


class BadHeader(Exception):
    """A block file whose header does not describe the block asked for."""


class CacheCorrupt(Exception):
    """A cached block failed verification; its files were dropped."""


class Recheck(enum.Enum):
    RECHECK = "recheck"


RECHECK = Recheck.RECHECK


@dataclasses.dataclass(slots=True)
class OpenBlock:
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
        return block_layout(self.block_length, self.checksum.bytes_per_checksum)

    def close(self) -> None:
        for fd in (self.fd, self.direct_fd):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass


def block_layout(block_length: int, bpc: int) -> tuple[int, int]:
    """(where the flags start, where the block's bytes start) in a block's cache file."""
    chunks = -(-block_length // bpc)
    flags_at = HEADER.size + 4 * chunks
    return flags_at, -(-(flags_at + chunks) // PAGE) * PAGE


def advise_reads(block: OpenBlock, data_offset: int, data_length: int, *, data: bool = True) -> None:
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
            os.posix_fadvise(block.fd, HEADER.size, data_at - HEADER.size, os.POSIX_FADV_WILLNEED)
    except OSError:
        pass


@dataclasses.dataclass(frozen=True, slots=True)
class Lookup:
    """A lookup begun by `BlockCache.begin_lookup`: its block, range and preads."""

    key: BlockKey
    block: OpenBlock
    offset: int
    length: int
    reads: list[tuple[int, bytearray, int]]  # (fd, buffer, file offset): the data, its checksums, its flags
    chunks: int  # how many the lookup covers (one flag byte each)
    direct: bool  # the data through the block's O_DIRECT open, into an aligned buffer


def parse_header(header: bytes, block_length: int) -> Checksum:
    """The checksum scheme a block file's header names; BadHeader when it is not this block's."""
    if len(header) < HEADER.size:
        raise BadHeader("short header")
    magic, version, kind, _, bpc, stored_length = HEADER.unpack(header)
    if magic != MAGIC or version != VERSION or kind not in TYPE_NAMES or kind == CHECKSUM_NULL:
        raise BadHeader("bad header")
    if stored_length != block_length:
        raise BadHeader(f"block length {stored_length}, expected {block_length}")
    try:
        return Checksum.of(kind, bpc)
    except ProtocolError:
        raise BadHeader(f"bad bytes per checksum {bpc}") from None


def open_for_store(path: str, checksum: Checksum, block_length: int) -> int:
    """The block's file for writing; a new one appears (by a link) with its header complete."""
    try:
        return os.open(path, os.O_WRONLY)
    except FileNotFoundError:
        pass
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        header = HEADER.pack(MAGIC, VERSION, checksum.kind, 0, checksum.bytes_per_checksum, block_length)
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


def write_chunks(path: str, block_length: int, checksum: Checksum, chunk_offset: int, data: bytes | bytearray,
                 sums: bytes | bytearray) -> int:
    """Store whole chunks with their checksums (data, then checksums, then flags); the file's size on disk."""
    bpc = checksum.bytes_per_checksum
    first = chunk_offset // bpc
    count = -(-len(data) // bpc)
    flags_at, data_at = block_layout(block_length, bpc)
    fd = open_for_store(path, checksum, block_length)
    try:
        os.pwrite(fd, data, data_at + chunk_offset)
        os.pwrite(fd, sums, HEADER.size + 4 * first)
        os.pwrite(fd, bytes([PRESENT]) * count, flags_at + first)
        return os.fstat(fd).st_blocks * 512
    finally:
        os.close(fd)


def scan(root: str) -> dict[tuple[str, str], tuple[int, float]]:
    """Every block file under the cache root: (pool, stem) -> (bytes on disk, mtime). Removes
    header files left by stores that crashed before linking them into place."""
    found: dict[tuple[str, str], tuple[int, float]] = {}
    try:
        pools = [e for e in os.scandir(root) if e.is_dir()]
    except OSError:
        return found
    for pool in pools:
        try:
            entries = list(os.scandir(pool.path))
        except OSError:
            continue
        for e in entries:
            m = NAME.fullmatch(e.name)
            if m is None:
                _remove_stale_temporary(e)
                continue
            try:
                st = e.stat()
            except OSError:
                continue
            found[(pool.name, f"{m.group(1)}_{m.group(2)}")] = (st.st_blocks * 512, st.st_mtime)
    return found


def block_path(root: str, key: BlockKey) -> str:
    return os.path.join(root, key.pool, key.stem() + ".blk")


def unlink(root: str, pool: str, stem: str) -> None:
    try:
        os.unlink(os.path.join(root, pool, stem + ".blk"))
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
