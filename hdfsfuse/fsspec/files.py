"""The file `HdfsFileSystem.open` returns: seekable, pinned to the file it opened, exact on random
reads, with a readahead window that grows while reads stay sequential (as the mount's does)."""

from __future__ import annotations

from typing import Any, Protocol

from fsspec.caching import BaseCache, Fetcher, register_cache
from fsspec.spec import AbstractBufferedFile

from hdfsfuse.client.files import HdfsFile


class Reads(Protocol):
    """What a file needs of its filesystem: exact reads of the file it opened."""

    def read_open(self, file: HdfsFile, path: str, start: int, end: int) -> bytes | bytearray: ...

FIRST_WINDOW = 128 * 1024  # the readahead of the second read in a row; it doubles with each next


class AdaptiveReadahead(BaseCache):
    """Random reads fetch exactly what is asked. A read that starts where the previous one
    ended fetches at least a window past it; the window doubles per sequential read, up to
    `max_window`, and drops back on a seek."""

    name = "hdfsfuse-readahead"

    def __init__(self, blocksize: int, fetcher: Fetcher, size: int, max_window: int = 16 * 1024 * 1024) -> None:
        super().__init__(blocksize, fetcher, size)
        self.max_window = max_window
        self.buffer: bytes | bytearray | memoryview = b""
        self.buffer_start = 0
        self.next_offset = 0
        self.window = 0

    def _fetch(self, start: int | None, stop: int | None) -> bytes:
        start = 0 if start is None else start
        stop = self.size if stop is None else min(stop, self.size)
        if start >= stop:
            return b""
        sequential = start == self.next_offset and start > 0
        self.next_offset = stop
        buffered_end = self.buffer_start + len(self.buffer)
        if self.buffer_start <= start and stop <= buffered_end:
            self.hit_count += 1
            return bytes(self.buffer[start - self.buffer_start : stop - self.buffer_start])
        self.miss_count += 1
        head = b""
        if self.buffer_start <= start < buffered_end:  # the start is buffered: fetch only the rest
            head = bytes(self.buffer[start - self.buffer_start :])
        fetch_from = start + len(head)
        fetch_to = stop
        if sequential:
            self.window = min(self.max_window, max(FIRST_WINDOW, self.window * 2))
            fetch_to = min(self.size, max(stop, fetch_from + self.window))
        else:
            self.window = 0
        data = self.fetcher(fetch_from, fetch_to)
        self.total_requested_bytes += fetch_to - fetch_from
        self.buffer, self.buffer_start = memoryview(data), fetch_from
        if not head and fetch_to == stop:
            return bytes(data)  # exactly what was asked (no copy when the read returned bytes)
        return head + bytes(self.buffer[: stop - fetch_from])


class HdfsBufferedFile(AbstractBufferedFile):  # type: ignore[misc]
    """A read-only file of HDFS, pinned at open to its fileId and block ids."""

    def __init__(self, fs: Reads, path: str, file: HdfsFile, *, readahead_max: int,
                 cache_type: str = AdaptiveReadahead.name, cache_options: dict[str, Any] | None = None,
                 **kwargs: Any) -> None:
        self.file = file
        options = dict(cache_options or {})
        if cache_type == AdaptiveReadahead.name:
            options.setdefault("max_window", readahead_max)
        super().__init__(fs, path, mode="rb", cache_type=cache_type, cache_options=options,
                         size=file.length, **kwargs)

    def _fetch_range(self, start: int, end: int) -> bytes | bytearray:
        return self.fs.read_open(self.file, self.path, start, end)  # type: ignore[no-any-return]


register_cache(AdaptiveReadahead, clobber=True)
