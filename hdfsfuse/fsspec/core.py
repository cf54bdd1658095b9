"""What both fsspec faces do, as trio functions on the portal's loop: metadata, exact reads and
`cat_ranges`, each bounded by `request_timeout`, with errors translated once into Python's own
exceptions (the message is the mount's log line for the same failure)."""

from __future__ import annotations

import collections
import errno
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio

from hdfsfuse.client import HdfsClient
from hdfsfuse.client.files import HdfsFile
from hdfsfuse.errors import FileNotFound, HdfsError, NotADirectory, to_errno
from hdfsfuse.fsspec import info as infos
from hdfsfuse.fsspec import ranges, seen
from hdfsfuse.fsspec.ranges import Span
from hdfsfuse.fsspec.recent import RecentStatuses

log = logging.getLogger(__name__)

T = TypeVar("T")

WHOLE_FILE = 1 << 62  # a range past any file's end: the locations of all its blocks
CONCURRENT_READS = 16  # spans of one cat_ranges call read at once

_EXCEPTIONS: dict[int, type[OSError]] = {
    errno.ENOENT: FileNotFoundError,
    errno.EACCES: PermissionError,
    errno.EPERM: PermissionError,
    errno.EROFS: PermissionError,
    errno.EISDIR: IsADirectoryError,
    errno.ENOTDIR: NotADirectoryError,
    errno.ETIMEDOUT: TimeoutError,
}


def python_error(op: str, what: str, exc: BaseException, request_timeout: float) -> OSError:
    """The one translation of a failure into Python's exception for its errno."""
    if isinstance(exc, trio.TooSlowError):
        return TimeoutError(errno.ETIMEDOUT, f"{op} {what}: no answer within request_timeout={request_timeout:g}s")
    if isinstance(exc, OSError) and not isinstance(exc, HdfsError):
        return exc
    if not isinstance(exc, HdfsError):
        log.debug("unexpected error in %s %s", op, what, exc_info=exc)
    code = to_errno(exc)
    cls = _EXCEPTIONS.get(code, OSError)
    return cls(code, f"{op} {what}: {exc} ({errno.errorcode.get(code, code)})")


class Core:
    """The filesystem's work on the loop that owns `client`."""

    def __init__(self, client: HdfsClient, request_timeout: float) -> None:
        self.client = client
        self.namenode = client.namenode
        self.request_timeout = request_timeout
        self.recent = RecentStatuses()  # what `info` and `ls` just described, for `info` and `open`
        self.seen = seen.SeenBlocks()  # blocks of finalized files read before, for `cat`'s early read
        self.early_reads: collections.Counter[str] = collections.Counter()  # "kept" or "dropped"

    async def bounded(self, op: str, what: str, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run one request within `request_timeout`; what escapes becomes a Python OSError."""
        try:
            with trio.CancelScope(deadline=trio.current_time() + self.request_timeout):
                return await fn(*args)
            raise trio.TooSlowError  # reached only when the deadline cancelled the call
        except Exception as e:
            raise python_error(op, what, e, self.request_timeout) from None

    # ----- metadata -------------------------------------------------------------------------------

    async def info(self, path: str) -> dict[str, Any]:
        status = await self.namenode.get_file_link_info(path)
        if status is None:
            raise FileNotFound(f"{path}: no such file or directory")
        self.recent.note(path, status, time.monotonic())
        return infos.info(path, status)

    async def ls(self, path: str) -> list[dict[str, Any]]:
        try:
            entries = await self.namenode.list_dir(path)
        except NotADirectory:
            status = await self.namenode.get_file_info(path)
            if status is None:
                raise FileNotFound(f"{path}: no such file or directory") from None
            self.recent.note(path, status, time.monotonic())
            return [infos.info(path, status)]
        now = time.monotonic()
        described = []
        for entry in entries:
            child = infos.join(path, entry.path.decode("utf-8", "surrogateescape"))
            self.recent.note(child, entry, now)
            described.append(infos.info(child, entry))
        return described

    async def content_length(self, path: str) -> int:
        return (await self.namenode.get_content_summary(path)).length

    async def file_checksum(self, path: str) -> str:
        return await self.client.file_checksum(await self.open(path))

    # ----- reading --------------------------------------------------------------------------------

    async def open(self, path: str) -> HdfsFile:
        """The file at `path`, pinned to its fileId and block ids (`HdfsClient.open`).

        A file `info` or `ls` described within the last second (`RecentStatuses`) is opened as
        that file: its locations are asked by inode path, which also proves it still exists
        (one call, not getFileInfo and then the locations; the filesystem's client keeps no
        locations across opens). Gone since (deleted, or replaced by a new file): the path is
        opened afresh."""
        described = self.recent.file(path, time.monotonic())
        if described is not None:
            try:
                return await self.client.open(path, file_id=described.fileId, known=described)
            except FileNotFound:
                self.recent.forget(path)
        return await self.client.open(path)

    async def read(self, file: HdfsFile, offset: int, length: int) -> bytes | bytearray:
        """Exactly [offset, offset+length) of an open file, clamped at its end."""
        return await self.client.read_range(file, offset, length)

    async def cat(self, path: str, start: int | None, end: int | None) -> bytes | bytearray:
        """One read, its locations in one NameNode call (`HdfsClient.locate_range`).

        A range in blocks an earlier read of the path was told of (`SeenBlocks`) is read from
        them at once, while that call is in flight: its answer keeps the bytes only if it names
        the same length and blocks, else the range is read again as it says."""
        known = start is not None and start >= 0 and end is not None and end >= 0
        offset, length = (start, max(0, end - start)) if known else (0, WHOLE_FILE)  # type: ignore[operator]
        guess = self.seen.guess(path, offset, length)
        early: list[bytes | bytearray] = []
        same = False  # the answer names the guessed blocks
        if guess is None:
            answer = await self._answer(path, offset, length)
        else:
            failure: HdfsError | OSError | None = None
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._read_early, path, guess, start, end, early)
                try:
                    answer = await self._answer(path, offset, length)
                except (HdfsError, OSError) as e:  # raised outside the nursery, not as a group
                    failure = e
                    nursery.cancel_scope.cancel()
                else:
                    same = seen.same_range(guess, answer, offset, length)
                    if not same:
                        nursery.cancel_scope.cancel()  # whatever the early read gets is dropped
            if failure is not None:
                raise failure
        self.seen.note(path, answer)
        if same and early:
            self.early_reads["kept"] += 1
            data = early[0]
        else:
            if guess is not None:
                self.early_reads["dropped"] += 1
            data = await self._read_as(path, answer, start, end)
        self.client.stats.app_bytes += len(data)
        return data

    async def _answer(self, path: str, offset: int, length: int) -> seen.LocatedBlocks:
        try:
            return await self.client.locate_range(path, offset, length)
        except FileNotFound:
            self.seen.forget(path)
            await self.client.open(path)  # the precise error: no such file, or a directory
            raise

    async def _read_early(self, path: str, guess: seen.LocatedBlocks, start: int | None, end: int | None,
                          into: list[bytes | bytearray]) -> None:
        """The range read as the kept blocks say; a failure leaves it to the answer."""
        try:
            into.append(await self._read_as(path, guess, start, end))
        except (HdfsError, OSError) as e:
            log.debug("%s: the early read failed (%s); reading as the NameNode answers", path, e)

    async def _read_as(self, path: str, lbs: seen.LocatedBlocks, start: int | None,
                       end: int | None) -> bytes | bytearray:
        file = await self.client.range_file(path, lbs)
        lo, hi = resolve(start, end, file.length)
        return await self.client.fetch_range(file, lo, hi - lo)

    async def open_all(self, paths: list[str]) -> dict[str, HdfsFile | OSError]:
        """Each distinct path opened once, concurrently; a failure is kept as its exception."""
        opened: dict[str, HdfsFile | OSError] = {}

        async def one(path: str) -> None:
            try:
                opened[path] = await self.open(path)
            except (HdfsError, OSError) as e:
                opened[path] = python_error("open", path, e, self.request_timeout)

        async with trio.open_nursery() as nursery:
            for path in dict.fromkeys(paths):
                nursery.start_soon(one, path)
        return opened

    async def read_spans(self, files: dict[str, HdfsFile], spans: list[Span]) -> list[bytes | bytearray | OSError]:
        """Every span's bytes (or the exception that failed it), CONCURRENT_READS at a time."""
        results: list[bytes | bytearray | OSError] = [b""] * len(spans)
        limit = trio.CapacityLimiter(CONCURRENT_READS)

        async def one(i: int, span: Span) -> None:
            async with limit:
                try:
                    results[i] = await self.read(files[span.path], span.start, span.end - span.start)
                except (HdfsError, OSError) as e:
                    what = f"{span.path} [{span.start}, +{span.end - span.start})"
                    results[i] = python_error("read", what, e, self.request_timeout)

        async with trio.open_nursery() as nursery:
            for i, span in enumerate(spans):
                nursery.start_soon(one, i, span)
        return results


def resolve(start: int | None, end: int | None, size: int) -> tuple[int, int]:
    """fsspec's range arguments (None: the file's edge; negative: from its end) as [lo, hi)."""
    lo = 0 if start is None else (max(0, size + start) if start < 0 else min(start, size))
    hi = size if end is None else (max(0, size + end) if end < 0 else min(end, size))
    return lo, max(lo, hi)


async def cat_ranges(core: Core, paths: list[str], starts: list[int | None], ends: list[int | None],
                     gap: int) -> list[bytes | bytearray | OSError]:
    """Every requested range (or the exception that failed it): each file opened once, ranges
    closer than `gap` read as one exact span, spans read concurrently."""
    opened = await core.open_all(paths)
    results: list[bytes | bytearray | OSError] = [b""] * len(paths)
    wanted: list[int] = []
    lo_hi: dict[int, tuple[int, int]] = {}
    for i, path in enumerate(paths):
        file = opened[path]
        if isinstance(file, OSError):
            results[i] = file
        else:
            lo_hi[i] = resolve(starts[i], ends[i], file.length)
            wanted.append(i)
    spans = ranges.plan([paths[i] for i in wanted], [lo_hi[i][0] for i in wanted], [lo_hi[i][1] for i in wanted],
                        gap)
    files = {p: f for p, f in opened.items() if not isinstance(f, OSError)}
    for span, data in zip(spans, await core.read_spans(files, spans), strict=True):
        for member in span.members:
            i = wanted[member]
            if isinstance(data, OSError):
                results[i] = data
            else:
                lo, hi = lo_hi[i]
                results[i] = bytes(memoryview(data)[lo - span.start : hi - span.start])
    return results
