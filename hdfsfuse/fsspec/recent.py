"""Statuses of paths just described by `info` or a listing, for what pyarrow and dask ask next:
`info` of the same path again (answered from the description, as fsspec's listing caches do)
and the open of a file (which then asks the NameNode once, by inode path, instead of
getFileInfo and then the locations). Pure bookkeeping: the caller passes the clock.

Read from the callers' threads as well as the loop's: each step is one dict operation, which
the interpreter does whole, and a read never depends on two of them agreeing.
"""

from __future__ import annotations

import collections

from hdfsfuse.proto import hdfs_pb2

FileStatus = hdfs_pb2.HdfsFileStatusProto

RECENT_SECONDS = 1.0  # a description is trusted this long
RECENT_MAX = 4096  # statuses kept, the oldest dropped first


class RecentStatuses:
    """path -> the status a description gave it, for RECENT_SECONDS."""

    def __init__(self, *, seconds: float = RECENT_SECONDS, capacity: int = RECENT_MAX) -> None:
        self.seconds = seconds
        self.capacity = capacity
        self._kept: collections.OrderedDict[str, tuple[float, FileStatus]] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._kept)

    def note(self, path: str, status: FileStatus, now: float) -> None:
        self._kept.pop(path, None)
        self._kept[path] = (now, status)  # the newest last
        while len(self._kept) > self.capacity:
            try:
                self._kept.popitem(last=False)
            except KeyError:  # emptied meanwhile by another thread
                break

    def get(self, path: str, now: float) -> FileStatus | None:
        """The status `path` was described with at most `seconds` ago, else None."""
        kept = self._kept.get(path)
        if kept is None:
            return None
        if now - kept[0] > self.seconds:
            self._kept.pop(path, None)
            return None
        return kept[1]

    def file(self, path: str, now: float) -> FileStatus | None:
        """As `get`, for a file with a fileId only (what an open can be pinned to)."""
        status = self.get(path, now)
        return status if status is not None and status.fileType == FileStatus.IS_FILE and status.fileId else None

    def forget(self, path: str | None = None) -> None:
        """Forget `path`, or every path."""
        if path is None:
            self._kept.clear()
        else:
            self._kept.pop(path, None)
