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

Each entry holds the serialized `LocatedBlocksProto` (about 0.7 KiB for a one-block file with
three replicas), at most `capacity` entries, the least recently used dropped first.
"""

from __future__ import annotations

import collections

from hdfsfuse.proto import hdfs_pb2

FileStatus = hdfs_pb2.HdfsFileStatusProto
LocatedBlocks = hdfs_pb2.LocatedBlocksProto

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


class LocatedFiles:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._files: collections.OrderedDict[int, tuple[int, int, bytes]] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._files)

    def remember(self, status: FileStatus, locations: LocatedBlocks) -> None:
        """Keep the locations of the file `status` describes, if they are all of a finalized file."""
        if self.capacity <= 0 or locations.fileLength != status.length or not complete(locations):
            return
        self._files[status.fileId] = (status.modification_time, status.length, locations.SerializeToString())
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
        mtime, length, blob = kept
        if mtime != status.modification_time or length != status.length:
            del self._files[status.fileId]
            return None
        self._files.move_to_end(status.fileId)
        return hdfs_pb2.LocatedBlocksProto.FromString(blob)

    def forget(self, file_id: int) -> None:
        self._files.pop(file_id, None)

    def clear(self) -> None:
        self._files.clear()
