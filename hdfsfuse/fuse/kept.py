"""Lookups and opens answered from what listings told (`NameCache`) and from the client's kept
locations (`LocatedFiles`), fetching a listing window when they must. Does I/O (NameNode
listings); the decisions are `fuse.names`'s and `client.located`'s.
"""

from __future__ import annotations

import time

from hdfsfuse.client.located import LocatedFiles, settled
from hdfsfuse.fuse.inodes import Entry, InodeTable
from hdfsfuse.fuse.names import NameCache
from hdfsfuse.namenode.client import FileStatus, NameNodeClient
from hdfsfuse.namenode.viewfs import ViewNameNode
from hdfsfuse.proto import hdfs_pb2
from hdfsfuse.stats import Stats

IS_FILE = hdfs_pb2.HdfsFileStatusProto.IS_FILE


class KeptMetadata:
    """The mount's kept names and locations, for its own identity only."""

    def __init__(self, names: NameCache, located: LocatedFiles, namenode: NameNodeClient | ViewNameNode,
                 inodes: InodeTable, stats: Stats) -> None:
        self.names = names
        self.located = located
        self.nn = namenode
        self.inodes = inodes
        self.stats = stats

    async def lookup(self, parent: Entry, name: bytes) -> tuple[float, FileStatus] | None:
        """(expiry, status) of `name` in `parent` while kept; else from a window that holds it.

        An expired name whose file's locations are still kept is renewed by a plain listing
        page: a third of the calls of located windows, and lighter ones."""
        if not self.names.enabled:
            return None
        known = self.names.get(parent.inode, name, time.monotonic())
        if known is not None:
            return known
        before = self.names.expired(parent.inode, name)
        kept = before is not None and self.located.has(before)
        return await self.window(parent, name, need_location=not kept)

    async def for_open(self, entry: Entry, file_id: int, status: FileStatus) -> FileStatus | None:
        """`status` (the inode's fresh attributes' source) if an open may trust it; the
        locations of its window are fetched with one located listing when none are kept."""
        if status.fileType != IS_FILE or status.fileId != file_id:
            return None
        if not settled(status, time.time_ns() // 1_000_000):
            return None  # changed in the last minute: likely to change again, so the open asks
        if not self.located.has(status) and entry.parent is not None:
            fetched = await self.window(entry.parent, entry.name.encode("utf-8", "surrogateescape"))
            if fetched is not None and fetched[1].fileId == file_id:
                status = fetched[1]
        return status

    async def window(self, parent: Entry, name: bytes, *, need_location: bool = True,
                     ) -> tuple[float, FileStatus] | None:
        """One listing page of `parent` that holds `name` (`NameCache`): every status in it is
        kept, with (`need_location`) the locations of its finalized files. Returns `name`'s
        entry, if found."""
        if self.inodes.by_path or parent.snapshot:
            return None
        now = time.monotonic()
        start_after = self.names.window_after(parent.inode, name, now, located=need_location)
        if start_after is None:
            return None
        page = await self.nn.get_listing_page(parent.nn_path, start_after, need_location=need_location)
        if need_location:
            self.stats.located_windows += 1
        else:
            self.stats.name_windows += 1
        named = []
        for status in page.partialListing:
            if status.HasField("locations"):
                if not self.located.has(status):  # (kept ones stay until a read finds them stale)
                    self.located.remember(status, status.locations)
                status.ClearField("locations")  # kept once, packed, in `located`
            named.append((status.path, status))
        self.names.store(parent.inode, parent.shown, named, now)
        return self.names.get(parent.inode, name, now)
