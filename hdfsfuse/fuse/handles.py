"""Open file handles and their readahead buffers.

A sequential reader's handle keeps buffers of the bytes ahead of it (`Chunk`), filled by
background tasks within the mount's readahead budget (`readahead_total`). A read served from
them waits for buffers in flight; a failed prefetch only makes its reads go to HDFS directly.
Does I/O through the client's `fetch_stored`: buffers hold bytes as stored.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import trio

from hdfsfuse.client.files import HdfsFile
from hdfsfuse.erasure.arrival import Arrival
from hdfsfuse.fuse.readahead import ReadaheadBudget, ReadaheadPlanner, prefetch_pieces
from hdfsfuse.stats import Stats

log = logging.getLogger(__name__)

Fetch = Callable[..., Awaitable[bytes | bytearray]]  # HdfsClient.fetch_stored


@dataclass
class Chunk:
    """A readahead buffer: file bytes [offset, offset+length) as stored (an encrypted file's
    ciphertext, decrypted as each read takes its part), filled by a background task. An
    erasure-coded file's has an `arrival`: its first bytes can be read before the last land."""

    offset: int
    length: int
    done: trio.Event = field(default_factory=trio.Event)
    data: bytes | bytearray | None = None
    cancel: trio.CancelScope = field(default_factory=trio.CancelScope)
    arrival: Arrival | None = None

    @property
    def end(self) -> int:
        return self.offset + self.length


class OpenFile:
    def __init__(self, inode: int, file: HdfsFile, planner: ReadaheadPlanner) -> None:
        self.inode = inode
        self.file = file
        self.planner = planner
        self.chunks: list[Chunk] = []


class OpenFiles:
    """The handle table: file handles by number, and each inode's open handles."""

    def __init__(self) -> None:
        self.files: dict[int, OpenFile] = {}
        self.by_inode: dict[int, list[OpenFile]] = {}

    def add(self, fh: int, handle: OpenFile) -> None:
        self.files[fh] = handle
        self.by_inode.setdefault(handle.inode, []).append(handle)

    def pop(self, fh: int) -> OpenFile | None:
        handle = self.files.pop(fh, None)
        if handle is not None:
            handles = self.by_inode[handle.inode]
            handles.remove(handle)
            if not handles:
                del self.by_inode[handle.inode]
        return handle

    def is_open(self, inode: int) -> bool:
        return inode in self.by_inode

    def growing(self, inode: int) -> OpenFile | None:
        """An open handle of `inode` whose file is being written, if any."""
        for handle in self.by_inode.get(inode, ()):
            if handle.file.under_construction:
                return handle
        return None


class Readahead:
    """Prefetches for sequential readers, in background tasks, within one budget for the mount."""

    def __init__(self, fetch: Fetch, budget: ReadaheadBudget, request_timeout: float, stats: Stats,
                 nursery: trio.Nursery) -> None:
        self.fetch = fetch
        self.budget = budget
        self.request_timeout = request_timeout
        self.stats = stats
        self._nursery = nursery  # owns the prefetch tasks

    def start(self, handle: OpenFile, offset: int, length: int) -> None:
        """Start filling [offset, +length) ahead of the handle's reader, if the budget allows."""
        if not self.budget.try_take(length):
            log.debug("%s: readahead budget exhausted; skipping a %d-byte prefetch", handle.file.path, length)
            handle.planner.frontier = offset  # let a later read try again
            return
        # A striped file's prefetch fans out over its data units already: one read, whose
        # first bytes are read as they land (its arrival).
        striped = handle.file.ec_policy is not None
        parts = [(offset, length)] if striped else prefetch_pieces(offset, length)
        landing = striped and handle.file.decryptor is None  # an encrypted file's bytes land as ciphertext
        for start, n in parts:
            chunk = Chunk(start, n, arrival=Arrival() if landing else None)
            handle.chunks.append(chunk)
            self._nursery.start_soon(self._prefetch, handle.file, chunk)

    async def _prefetch(self, file: HdfsFile, chunk: Chunk) -> None:
        """A background read: whatever it raises is logged here; its reads then go to HDFS directly."""
        try:
            with chunk.cancel, trio.move_on_after(self.request_timeout):
                chunk.data = await self.fetch(file, chunk.offset, chunk.length, arrival=chunk.arrival)
        except Exception as e:
            log.warning("%s: readahead of [%d, +%d) failed (%s: %s); reading directly",
                        file.path, chunk.offset, chunk.length, type(e).__name__, e)
        finally:
            chunk.done.set()
            if chunk.arrival is not None:
                chunk.arrival.finish()

    async def take(self, handle: OpenFile, start: int, end: int) -> bytes | memoryview | None:
        """The range from readahead buffers, if they cover it entirely (waiting for in-flight ones)."""
        covering = []
        pos = start
        for chunk in sorted(handle.chunks, key=lambda c: c.offset):
            if chunk.offset <= pos < chunk.end:
                covering.append(chunk)
                pos = chunk.end
                if pos >= end:
                    break
        if pos < end or not covering:
            return None
        self.stats.cache_hits["readahead"] += 1
        parts = []
        decryptor = handle.file.decryptor  # buffers hold an encrypted file's ciphertext
        for chunk in covering:
            lo = max(start, chunk.offset) - chunk.offset
            hi = min(end, chunk.end) - chunk.offset
            if chunk.arrival is not None and not chunk.done.is_set() and await chunk.arrival.wait_for(hi):
                data = chunk.arrival.buffer  # its bytes up to `hi` have landed, verified
            else:
                await chunk.done.wait()
                data = chunk.data
            if data is None:
                return None  # the prefetch failed: read directly
            part = memoryview(data)[lo:hi]
            parts.append(part if decryptor is None else decryptor.decrypt(part, chunk.offset + lo))
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def drop(self, handle: OpenFile, before: int | None) -> None:
        """Free buffers wholly before `before` (consumed), or all of them (a seek, a release).

        A buffer still arriving is never dropped as consumed: the kernel's readahead requests
        run concurrently and finish out of order, so an earlier read may still be waiting for it
        (cancelling it made that read, and the bytes, go to HDFS a second time). It is freed by
        a later read once it has arrived.
        """
        keep = []
        for chunk in handle.chunks:
            if before is not None and (chunk.end > before or not chunk.done.is_set()):
                keep.append(chunk)
                continue
            chunk.cancel.cancel()
            self.budget.give_back(chunk.length)
        handle.chunks = keep
