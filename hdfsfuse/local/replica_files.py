"""A local replica's files, as its DataNode passed them: verified preads, inline, in a thread or
through io_uring, and the slot in the DataNode's shared memory that says they are still current."""

from __future__ import annotations

import dataclasses
import errno
import logging
import os

from hdfsfuse.datanode.checksum import Checksum
from hdfsfuse.local import short_circuit_protocol as scp
from hdfsfuse.local.domain_socket import (
    LocalDataNode,
    ReplicaKey,
    Segment,
)
from hdfsfuse.local.uring import RingClosed, UringReads
from hdfsfuse.local.verified_io import (
    DIRECT_MIN,
    chunk_preads,
    chunk_span,
    direct_buffer,
    open_direct,
    read_in,
    read_verified,
    read_verified_direct,
    verified,
)

log = logging.getLogger(__name__)


@dataclasses.dataclass(eq=False, slots=True)
class LocalReplica:
    """A block's open files, as a local DataNode passed them, and the slot that guards them."""

    key: ReplicaKey
    data_fd: int
    meta_fd: int
    checksum: Checksum
    length: int  # the finalized block's length: its file's size while unchanged
    datanode: LocalDataNode
    segment: Segment
    slot: int
    users: int = 0
    dropped: bool = False
    direct_fd: int = -2  # the data file opened again with O_DIRECT, for large reads; -1: refused; -2: not yet

    @property
    def block(self) -> tuple[str, int, int]:
        """(pool, block id, generation stamp): the same bytes on every replica."""
        return self.key[1:]

    def usable(self) -> bool:
        return self.segment.valid(self.slot)

    def read(self, offset: int, length: int, what: str, *, nowait: bool = False) -> bytes | bytearray:
        """[offset, offset+length) of the block, every chunk verified (verified_io.read_verified);
        a large read through the O_DIRECT open, once `open_direct` made one."""
        if length > DIRECT_MIN and self.direct_fd >= 0 and not nowait:
            return read_verified_direct(self.direct_fd, self.data_fd, 0, self.meta_fd, scp.META_HEADER.size,
                                        self.checksum, self.length, offset, length, what)
        return read_verified(self.data_fd, 0, self.meta_fd, scp.META_HEADER.size, self.checksum, self.length,
                             offset, length, what, nowait=nowait)

    async def read_through(self, ring: UringReads, offset: int, length: int, what: str) -> bytes | bytearray:
        """`read`, its chunks and checksums read concurrently through io_uring (a small read
        that must wait for the disk: no worker thread)."""
        reads = chunk_preads(self.data_fd, 0, self.meta_fd, scp.META_HEADER.size, self.checksum, self.length,
                             offset, length)
        got = await ring.pread_many(reads)
        return verified(got[0], got[1] if len(got) > 1 else b"", self.checksum, self.length, offset, length, what)

    async def read_direct_through(self, ring: UringReads, offset: int, length: int,
                                  what: str) -> bytes | bytearray | None:
        """`read` of a large range through the O_DIRECT open, its data and checksums read
        concurrently through io_uring and verified here, with no worker thread; None where
        `read_verified_direct` would fall back to the page cache (an unaligned start, a
        refused read): then `read` in a thread."""
        first, count, start, end = chunk_span(offset, length, self.checksum.bytes_per_checksum, self.length)
        n = end - start
        data = direct_buffer(start, n) if self.direct_fd >= 0 else None
        if data is None:
            return None
        sums = bytearray(self.checksum.size * count)
        reads = [(self.direct_fd, data, start)]
        if sums:
            reads.append((self.meta_fd, sums, scp.META_HEADER.size + 4 * first))
        try:
            got = await ring.pread_into(reads)
        except OSError as e:
            if e.errno == errno.EINVAL and not isinstance(e, RingClosed):
                return None  # the filesystem refuses this O_DIRECT read
            raise
        if got[0] < n:  # the file ends early, or a read cut short: the rest through the page cache
            rest = (await ring.pread_many([(self.data_fd, n - got[0], start + got[0])]))[0]
            data[got[0] : got[0] + len(rest)] = rest
            got[0] += len(rest)
        del data[min(n, got[0]) :]
        if sums:
            del sums[got[1] :]
        return verified(data, sums, self.checksum, self.length, offset, length, what)

    def open_direct(self) -> None:
        """Open the data file again with O_DIRECT, once (in the trio thread, before a large read
        is handed to a worker). A large read is a sequential reader's: it then costs no copy out
        of the page cache, and leaves no second copy of the block in memory beside the mount's
        own pages."""
        if self.direct_fd == -2:
            self.direct_fd = open_direct(self.data_fd)

    def read_in(self, offset: int, length: int) -> None:
        """Start the disk reads of `read` without waiting (see verified_io.read_in)."""
        read_in(self.data_fd, 0, self.meta_fd, scp.META_HEADER.size, self.checksum, self.length, offset, length)

    def close_files(self) -> None:
        os.close(self.data_fd)
        os.close(self.meta_fd)
        if self.direct_fd >= 0:
            os.close(self.direct_fd)
