"""Statuses of files just described by `info` or a listing, for an open of the same path soon
after: pyarrow asks `info` (or lists) and then opens, and the open can then ask the NameNode
once, by inode path, instead of getFileInfo and then the locations. Pure bookkeeping: the caller
passes the clock."""

from __future__ import annotations

import collections

from hdfsfuse.proto import hdfs_pb2

FileStatus = hdfs_pb2.HdfsFileStatusProto

RECENT_SECONDS = 1.0  # an open trusts the fileId a description of its path gave this recently
RECENT_MAX = 4096  # statuses kept, the oldest dropped first


class RecentStatuses:
    """path -> the status a description gave it, for RECENT_SECONDS; files only."""

    def __init__(self, *, seconds: float = RECENT_SECONDS, capacity: int = RECENT_MAX) -> None:
        self.seconds = seconds
        self.capacity = capacity
        self._kept: collections.OrderedDict[str, tuple[float, FileStatus]] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._kept)

    def note(self, path: str, status: FileStatus, now: float) -> None:
        if status.fileType != FileStatus.IS_FILE or not status.fileId:
            return
        self._kept[path] = (now, status)
        self._kept.move_to_end(path)
        if len(self._kept) > self.capacity:
            self._kept.popitem(last=False)

    def get(self, path: str, now: float) -> FileStatus | None:
        """The status `path` was described with at most `seconds` ago, else None."""
        kept = self._kept.get(path)
        if kept is None:
            return None
        if now - kept[0] > self.seconds:
            del self._kept[path]
            return None
        return kept[1]

    def forget(self, path: str) -> None:
        self._kept.pop(path, None)
