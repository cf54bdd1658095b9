"""Verified reads of block bytes held in local files. Does I/O (pread), nothing else.

Owns what the block cache and short-circuit reads share: a block's bytes in one file and its
big-endian CRC per checksum chunk in another (or further on in the same file). A read covers
the whole chunks its range touches, checks every one, and trims to the range:

    data file:  ... | chunk first | ... | chunk last | ...      (at data_at + chunk * bpc)
    sums file:  ... | BE32 first  | ... | BE32 last  | ...      (at sums_at + chunk * 4)

`nowait` reads use RWF_NOWAIT: they return only bytes already in the kernel's page cache and
raise WouldBlock instead of waiting for a disk, so the trio loop may call them inline. With the
C extension, a read's preads and its check are one call without the GIL (`read_chunks`), which
reads and verifies 256 KiB at a time, each piece checked while it is still in the CPU's cache.

`read_verified_direct` reads a large range with O_DIRECT: the disk's bytes land in the read's own
buffer, with no copy out of the page cache (and no second copy of the block kept there):

    buffered:  disk --DMA--> page cache --copy--> buffer --CRC, reply
    direct:    disk --DMA--> buffer --CRC, reply
"""

from __future__ import annotations

import errno
import os

from hdfsfuse.datanode.buffers import aligned_buffer
from hdfsfuse.datanode.checksum import Checksum, chunked_crc

# Both preads and the check in one call without the GIL (the C extension), when it is built.
_read_chunks = getattr(chunked_crc, "read_chunks", None)
_READ_PIECE = getattr(chunked_crc, "read_piece", 0)
# An O_DIRECT read's buffer address, file offset and length: multiples of the device's logical
# block size (512 or 4096 bytes), which 4096 covers.
DIRECT_ALIGN = 4096
DIRECT_MIN = 128 * 1024  # larger reads are a sequential reader's, worth an O_DIRECT open


class WouldBlock(Exception):
    """A `nowait` read would have to wait for the disk: do it in a worker thread."""


class ShortRead(Exception):
    """The files end before the bytes the block's length promises."""


def pread_nowait(fd: int, n: int, offset: int) -> bytearray:
    buf = bytearray(n)
    try:
        got = os.preadv(fd, [buf], offset, os.RWF_NOWAIT)
    except BlockingIOError:
        raise WouldBlock from None
    if got != n:  # partly in memory, or the file ends early: let a plain read tell
        raise WouldBlock
    return buf


def chunk_span(offset: int, length: int, bpc: int, block_length: int) -> tuple[int, int, int, int]:
    """(first chunk, chunk count, block offset of the first chunk, end of the last one)."""
    first, last = offset // bpc, (offset + length - 1) // bpc
    return first, last - first + 1, first * bpc, min((last + 1) * bpc, block_length)


def read_in(data_fd: int, data_at: int, sums_fd: int, sums_at: int, checksum: Checksum, block_length: int,
            offset: int, length: int) -> None:
    """Have the kernel start reading what `read_verified` of this range will read (the chunks and
    their checksums), without waiting: called before a read is handed to a worker thread, so the
    disk works during the hand-over. Advice that fails is only advice."""
    bpc = checksum.bytes_per_checksum
    first, count, start, end = chunk_span(offset, length, bpc, block_length)
    try:
        os.posix_fadvise(data_fd, data_at + start, end - start, os.POSIX_FADV_WILLNEED)
        if checksum.size:
            os.posix_fadvise(sums_fd, sums_at + 4 * first, 4 * count, os.POSIX_FADV_WILLNEED)
    except OSError:
        pass


def read_verified(
    data_fd: int, data_at: int, sums_fd: int, sums_at: int, checksum: Checksum, block_length: int,
    offset: int, length: int, what: str, *, nowait: bool = False,
) -> bytes | bytearray:
    """Exactly [offset, offset+length) of the block, every chunk it touches verified.

    Raises ChecksumMismatch (naming `what`), ShortRead, WouldBlock (`nowait`) or OSError.
    """
    bpc = checksum.bytes_per_checksum
    first, count, start, end = chunk_span(offset, length, bpc, block_length)
    if _read_chunks is not None and checksum.native and _READ_PIECE % bpc == 0:
        try:
            data, got, sums_got, bad = _read_chunks(checksum.kind, bpc, data_fd, data_at + start, end - start,
                                                    sums_fd, sums_at + 4 * first, nowait)
        except BlockingIOError:
            raise WouldBlock from None
        if bad >= 0:
            raise checksum.mismatch(what, start + bad * bpc)
        if got != end - start or sums_got != checksum.size * count:
            if nowait:  # partly in memory, or the file ends early: let a plain read tell
                raise WouldBlock
            raise ShortRead(f"{what}: the local files end before block offset {end}")
    else:
        pread = pread_nowait if nowait else os.pread
        sums = pread(sums_fd, 4 * count, sums_at + 4 * first) if checksum.size else b""
        data = pread(data_fd, end - start, data_at + start)
        return verified(data, sums, checksum, block_length, offset, length, what)
    if offset == start and length == len(data):
        return data
    return data[offset - start : offset - start + length]


def chunk_preads(data_fd: int, data_at: int, sums_fd: int, sums_at: int, checksum: Checksum, block_length: int,
                 offset: int, length: int) -> list[tuple[int, int, int]]:
    """The preads, (fd, bytes, offset), of `read_verified` of this range: its chunks, then their
    checksums (none for CHECKSUM_NULL). For readers that do them elsewhere (hdfsfuse.local.uring),
    then hand the bytes to `verified`."""
    first, count, start, end = chunk_span(offset, length, checksum.bytes_per_checksum, block_length)
    reads = [(data_fd, end - start, data_at + start)]
    if checksum.size:
        reads.append((sums_fd, 4 * count, sums_at + 4 * first))
    return reads


def verified(data: bytes | bytearray, sums: bytes | bytearray, checksum: Checksum, block_length: int,
             offset: int, length: int, what: str) -> bytes | bytearray:
    """Exactly [offset, offset+length) of the block, from the chunks and checksums that
    `chunk_preads` read, every chunk verified. Raises ChecksumMismatch or ShortRead."""
    _, count, start, end = chunk_span(offset, length, checksum.bytes_per_checksum, block_length)
    if len(data) != end - start or len(sums) != checksum.size * count:
        raise ShortRead(f"{what}: the local files end before block offset {end}")
    checksum.verify(data, sums, start, what)
    if offset == start and length == len(data):
        return data
    return data[offset - start : offset - start + length]


def direct_buffer(pos: int, n: int) -> bytearray | None:
    """An aligned buffer for an O_DIRECT read of `n` bytes at file offset `pos` (rounded up to
    whole 4 KiB blocks), or None where that read cannot be made: `pos` not aligned, a read of
    one block or less, no C extension. Then read through the page cache."""
    padded = -(-n // DIRECT_ALIGN) * DIRECT_ALIGN
    if aligned_buffer is None or pos % DIRECT_ALIGN or padded <= DIRECT_ALIGN:
        return None
    return aligned_buffer(padded, DIRECT_ALIGN)


def open_direct(data_fd: int) -> int:
    """A second open of `data_fd`'s file with O_DIRECT (through /proc/self/fd: the same inode,
    however the file was passed), or -1 where that is refused (permissions, a filesystem
    without direct I/O). The original stays buffered: small reads want the page cache."""
    try:
        return os.open(f"/proc/self/fd/{data_fd}", os.O_RDONLY | os.O_DIRECT | os.O_CLOEXEC)
    except (OSError, AttributeError):  # AttributeError: no O_DIRECT on this platform
        return -1


def read_verified_direct(
    direct_fd: int, data_fd: int, data_at: int, sums_fd: int, sums_at: int, checksum: Checksum, block_length: int,
    offset: int, length: int, what: str,
) -> bytes | bytearray:
    """`read_verified` of the same range, its data read through `direct_fd` (an O_DIRECT open of
    `data_fd`'s file) into an aligned buffer. Falls back to `read_verified` where the range's
    start is not aligned, without the C extension, or when the filesystem refuses the read
    (EINVAL). Raises what `read_verified` raises."""
    bpc = checksum.bytes_per_checksum
    first, count, start, end = chunk_span(offset, length, bpc, block_length)
    pos = data_at + start
    n = end - start
    data = direct_buffer(pos, n)
    if data is None:
        return read_verified(data_fd, data_at, sums_fd, sums_at, checksum, block_length, offset, length, what)
    try:
        got = os.preadv(direct_fd, [data], pos)
    except OSError as e:
        if e.errno != errno.EINVAL:
            raise
        return read_verified(data_fd, data_at, sums_fd, sums_at, checksum, block_length, offset, length, what)
    if got < n:  # the file ends early, or a read cut short: the rest through the page cache
        rest = os.pread(data_fd, n - got, pos + got)
        data[got : got + len(rest)] = rest
        got += len(rest)
    del data[min(got, n) :]
    sums = os.pread(sums_fd, 4 * count, sums_at + 4 * first) if checksum.size else b""
    return verified(data, sums, checksum, block_length, offset, length, what)
