"""Block locations of finalized files, kept across opens so that opening an unchanged file asks
the NameNode nothing. Pure code.

A file's locations are reused while the status an open is given says the file has not changed:
the same fileId (the key), length and modification time, and not being written. Entries come
from earlier opens and from listings that carried locations. A replica that moved or was lost
since is found when its DataNode refuses the read, and the reader then fetches the block's
locations again (`Locator`); a file deleted since fails there too, never reading another file.

An open trusts a kept status (and so these locations) only for a file that had not changed for a
minute (`settled`): a file just written, appended, truncated or replaced is the one likely to
change again, so its opens ask the NameNode, as the NFS client revalidates recently changed files
sooner.

Each entry holds the file's `LocatedBlocksProto` serialized without what it repeats from other
files: the DataNode descriptions, storage IDs and block pool ID of its blocks are kept once for
all files (interned) and put back when an open takes the entry; fields this client does not know
(a DataNode's usage figures) are dropped. A one-block file with three replicas costs about 0.4
KiB this way, against 1.4 KiB as the NameNode sends it. At most `capacity` entries are kept, the
least recently used dropped first.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator

from hdfsfuse.proto import hdfs_pb2

FileStatus = hdfs_pb2.HdfsFileStatusProto
LocatedBlocks = hdfs_pb2.LocatedBlocksProto
LocatedBlock = hdfs_pb2.LocatedBlockProto
INTERNED_MAX = 10_000  # shared parts kept once, at most (each holds its parts alive while kept here)

Internable = bytes | tuple[bytes, ...]

SETTLED_MS = 60_000  # a file unchanged this long (by its mtime) may be opened on a kept status


def settled(status: FileStatus, now_ms: int) -> bool:
    """Whether an open may trust the kept `status`: its file had not changed for `SETTLED_MS`."""
    return now_ms - status.modification_time >= SETTLED_MS


def complete(locations: LocatedBlocks) -> bool:
    """Whether `locations` name every block of a file that can no longer change under them."""
    if locations.underConstruction:
        return False
    if not locations.blocks:
        return locations.fileLength == 0
    last = locations.blocks[-1]
    return last.offset + last.b.numBytes == locations.fileLength


def _blocks(locations: LocatedBlocks) -> Iterator[LocatedBlock]:
    yield from locations.blocks
    if locations.HasField("lastBlock"):
        yield locations.lastBlock


class Interned:
    """One shared copy of each value (a block's DataNodes, storage and pool IDs, and the blocks'
    sets of them, repeat in file after file). Bounded: when full it starts over; values already
    handed out stay valid."""

    def __init__(self, capacity: int = INTERNED_MAX) -> None:
        self.capacity = capacity
        self._values: dict[Internable, Internable] = {}

    def __call__(self, value: Internable) -> Internable:
        if len(self._values) >= self.capacity:
            self._values.clear()
        return self._values.setdefault(value, value)


def pack(locations: LocatedBlocks, interned: Interned) -> tuple[bytes, tuple[bytes, ...]]:
    """`locations` without unknown fields, as (the rest serialized, each block's shared part).

    A block's shared part is a serialized `LocatedBlockProto` of only its pool ID, DataNodes and
    storage IDs: parsed into the rest of the block, it puts them back (a message merged into
    another sets its fields and appends to its repeated ones)."""
    rest = LocatedBlocks.FromString(locations.SerializeToString())
    rest.DiscardUnknownFields()
    shared = []
    for block in _blocks(rest):
        part = LocatedBlock(locs=block.locs, storageIDs=block.storageIDs)
        if block.b.HasField("poolId"):
            part.b.poolId = block.b.poolId
        shared.append(interned(part.SerializeToString()))
        block.b.ClearField("poolId")
        del block.locs[:]
        del block.storageIDs[:]
    # A replica set recurs across files: the shared parts of most files are one tuple.
    return rest.SerializeToString(), interned(tuple(shared))  # type: ignore[return-value]  # interned keeps each type


def unpack(rest: bytes, shared: tuple[bytes, ...]) -> LocatedBlocks:
    """The locations `pack` took apart."""
    locations = LocatedBlocks.FromString(rest)
    for block, part in zip(_blocks(locations), shared, strict=True):
        block.MergeFromString(part)
    return locations


class LocatedFiles:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._files: collections.OrderedDict[int, tuple[int, int, bytes, tuple[bytes, ...]]] = \
            collections.OrderedDict()
        self._interned = Interned()

    def __len__(self) -> int:
        return len(self._files)

    def remember(self, status: FileStatus, locations: LocatedBlocks) -> None:
        """Keep the locations of the file `status` describes, if they are all of a finalized file."""
        if self.capacity <= 0 or locations.fileLength != status.length or not complete(locations):
            return
        self._files[status.fileId] = (status.modification_time, status.length, *pack(locations, self._interned))
        self._files.move_to_end(status.fileId)
        while len(self._files) > self.capacity:
            self._files.popitem(last=False)

    def has(self, status: FileStatus) -> bool:
        kept = self._files.get(status.fileId)
        return kept is not None and kept[:2] == (status.modification_time, status.length)

    def find(self, status: FileStatus) -> LocatedBlocks | None:
        """The kept locations of the file `status` describes, if it has not changed since."""
        kept = self._files.get(status.fileId)
        if kept is None:
            return None
        mtime, length, rest, refs = kept
        if mtime != status.modification_time or length != status.length:
            del self._files[status.fileId]
            return None
        self._files.move_to_end(status.fileId)
        return unpack(rest, refs)

    def forget(self, file_id: int) -> None:
        self._files.pop(file_id, None)

    def clear(self) -> None:
        self._files.clear()
