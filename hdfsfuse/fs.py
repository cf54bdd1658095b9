"""The read-only FUSE filesystem (pyfuse3 on trio). Does I/O through `HdfsClient`.

Owns inode numbers (HDFS fileIds; the mount root is ROOT_INODE), lookup counts, the attribute,
entry and negative-lookup caches, directory snapshots, open file handles with their readahead
buffers, and the translation of every error into one errno and one log line (`_fuse_error`).
Every request is bounded by `request_timeout`.
"""

from __future__ import annotations

import errno
import grp
import json
import logging
import os
import pwd
import stat
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pyfuse3
import trio

from hdfsfuse.client import WHOLE_FILE, HdfsClient, HdfsFile
from hdfsfuse.errors import FileNotFound, HdfsError, to_errno
from hdfsfuse.namenode import FileStatus
from hdfsfuse.options import MountOptions
from hdfsfuse.proto import hdfs_pb2
from hdfsfuse.readahead import ReadaheadBudget, ReadaheadPlanner
from hdfsfuse.stats import snapshot
from hdfsfuse.wire import ProtocolError

log = logging.getLogger(__name__)

IS_DIR = hdfs_pb2.HdfsFileStatusProto.IS_DIR
IS_SYMLINK = hdfs_pb2.HdfsFileStatusProto.IS_SYMLINK
IS_FILE = hdfs_pb2.HdfsFileStatusProto.IS_FILE
STATS_XATTR = b"user.hdfsfuse.stats"  # on the mount root: live stats as JSON
FILE_XATTRS = (b"user.hdfs.replication", b"user.hdfs.block_size", b"user.hdfs.blocks")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC


class IdentityMap:
    """HDFS owner/group names to local ids by name, falling back to the configured ids."""

    def __init__(self, uid: int, gid: int) -> None:
        self.uid = uid
        self.gid = gid
        self._users: dict[str, int] = {}
        self._groups: dict[str, int] = {}

    def user(self, name: str) -> int:
        return self._resolve(self._users, name, lambda n: pwd.getpwnam(n).pw_uid, self.uid)

    def group(self, name: str) -> int:
        return self._resolve(self._groups, name, lambda n: grp.getgrnam(n).gr_gid, self.gid)

    @staticmethod
    def _resolve(cache: dict[str, int], name: str, lookup: Callable[[str], int], fallback: int) -> int:
        if name not in cache:
            try:
                cache[name] = lookup(name)
            except KeyError:
                cache[name] = fallback
        return cache[name]


@dataclass
class _Chunk:
    """A readahead buffer: file bytes [offset, offset+length), filled by a background task."""

    offset: int
    length: int
    done: trio.Event = field(default_factory=trio.Event)
    data: bytes | bytearray | None = None
    cancel: trio.CancelScope = field(default_factory=trio.CancelScope)

    @property
    def end(self) -> int:
        return self.offset + self.length


class _OpenFile:
    def __init__(self, file: HdfsFile, planner: ReadaheadPlanner) -> None:
        self.file = file
        self.planner = planner
        self.chunks: list[_Chunk] = []


class HdfsOperations(pyfuse3.Operations):
    supports_dot_lookup = False

    def __init__(self, client: HdfsClient, root: str, options: MountOptions, mountpoint: str,
                 nursery: trio.Nursery) -> None:
        super().__init__()
        self.client = client
        self.nn = client.namenode
        self.stats = client.stats
        self.root = root.rstrip("/") or "/"
        self.options = options
        self.mountpoint = os.path.abspath(mountpoint)
        self._nursery = nursery
        self.ids = IdentityMap(
            options.uid if options.uid is not None else os.getuid(),
            options.gid if options.gid is not None else os.getgid(),
        )
        self._paths: dict[int, str] = {pyfuse3.ROOT_INODE: self.root}
        self._lookups: dict[int, int] = {}
        self._attrs: dict[int, tuple[float, pyfuse3.EntryAttributes, FileStatus]] = {}
        self._negative: dict[tuple[int, bytes], float] = {}
        self._root_file_id: int | None = None
        self._dirs: dict[int, list[tuple[bytes, FileStatus]]] = {}  # snapshots taken at opendir
        self._dir_paths: dict[int, str] = {}
        self._files: dict[int, _OpenFile] = {}
        self._next_fh = 1
        self._cache_keys: dict[int, tuple[int, int]] = {}  # inode -> (mtime, length) of the kept page cache
        self.budget = ReadaheadBudget(options.readahead_total)

    # ----- helpers --------------------------------------------------------------------------------

    def _inode(self, st: FileStatus) -> int:
        if self._root_file_id is not None and st.fileId == self._root_file_id:
            return pyfuse3.ROOT_INODE
        return st.fileId

    def _path(self, inode: int) -> str:
        try:
            return self._paths[inode]
        except KeyError:
            raise pyfuse3.FUSEError(errno.ESTALE) from None

    @staticmethod
    def _join(parent: str, name: str) -> str:
        return f"{parent}/{name}" if parent != "/" else f"/{name}"

    def _attributes(self, st: FileStatus, inode: int) -> pyfuse3.EntryAttributes:
        a = pyfuse3.EntryAttributes()
        perm = st.permission.perm & 0o7777
        if st.fileType == IS_DIR:
            a.st_mode = stat.S_IFDIR | perm
            a.st_nlink = 2
            a.st_size = 0
        elif st.fileType == IS_SYMLINK:
            a.st_mode = stat.S_IFLNK | 0o777
            a.st_nlink = 1
            a.st_size = len(self._link_target(st.symlink))
        else:
            a.st_mode = stat.S_IFREG | perm
            a.st_nlink = 1
            a.st_size = st.length
        a.st_ino = inode
        a.st_uid = self.ids.user(st.owner)
        a.st_gid = self.ids.group(st.group)
        a.st_mtime_ns = st.modification_time * 1_000_000
        a.st_ctime_ns = a.st_mtime_ns
        a.st_atime_ns = (st.access_time or st.modification_time) * 1_000_000
        a.st_blksize = 128 * 1024
        a.st_blocks = -(-a.st_size // 512)
        a.entry_timeout = self.options.entry_timeout
        a.attr_timeout = self.options.attr_timeout
        a.generation = 0
        return a

    def _remember(self, st: FileStatus, path: str) -> pyfuse3.EntryAttributes:
        inode = self._inode(st)
        if inode != pyfuse3.ROOT_INODE:
            self._paths[inode] = path
        attrs = self._attributes(st, inode)
        self._attrs[inode] = (time.monotonic() + self.options.attr_timeout, attrs, st)
        return attrs

    def _link_target(self, raw: bytes) -> bytes:
        """Absolute HDFS link targets under the mount root point into the mount."""
        target = raw.decode("utf-8", "surrogateescape")
        if target.startswith("/"):
            if self.root == "/":
                return os.fsencode(self.mountpoint + target)
            if target == self.root or target.startswith(self.root + "/"):
                return os.fsencode(self.mountpoint + target[len(self.root) :])
        return os.fsencode(target)

    # ----- the one error boundary -----------------------------------------------------------------

    @asynccontextmanager
    async def _request(self, op: str, what: str) -> AsyncIterator[None]:
        """Bound the request in time and turn every failure into one errno and one log line."""
        try:
            with trio.fail_after(self.options.request_timeout):
                yield
        except pyfuse3.FUSEError:
            raise
        except Exception as e:
            raise self._fuse_error(op, what, e) from None

    def _fuse_error(self, op: str, what: str, exc: Exception) -> pyfuse3.FUSEError:
        """The one translation of a failure into an errno, with its one log line."""
        if isinstance(exc, trio.TooSlowError):
            log.error("%s %s: no answer within request_timeout=%gs", op, what, self.options.request_timeout)
            return pyfuse3.FUSEError(errno.EIO)
        if isinstance(exc, FileNotFound):
            return pyfuse3.FUSEError(errno.ENOENT)
        if not isinstance(exc, HdfsError | ProtocolError | OSError):
            log.exception("%s %s: unexpected error", op, what)
            return pyfuse3.FUSEError(errno.EIO)
        code = to_errno(exc)
        log.error("%s %s: %s (%s)", op, what, exc, errno.errorcode.get(code, code))
        return pyfuse3.FUSEError(code)

    # ----- metadata -------------------------------------------------------------------------------

    async def init_root(self) -> None:
        """Check the mount root exists and is a directory (before mounting)."""
        st = await self.nn.get_file_info(self.root)
        if st is None:
            raise FileNotFound(f"{self.root}: no such directory in HDFS")
        if st.fileType != IS_DIR:
            raise HdfsError(f"{self.root}: is not a directory")
        self._root_file_id = st.fileId
        self._remember(st, self.root)

    async def lookup(self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        parent = self._path(parent_inode)
        path = self._join(parent, name.decode("utf-8", "surrogateescape"))
        key = (parent_inode, name)
        async with self._request("lookup", path):
            expiry = self._negative.get(key)
            if expiry is not None:
                if expiry > time.monotonic():
                    self.stats.cache_hits["negative"] += 1
                    raise pyfuse3.FUSEError(errno.ENOENT)
                del self._negative[key]
            self.stats.cache_misses["entry"] += 1
            st = await self.nn.get_file_link_info(path)
            if st is None:
                if self.options.negative_timeout > 0:
                    self._negative[key] = time.monotonic() + self.options.negative_timeout
                raise pyfuse3.FUSEError(errno.ENOENT)
            attrs = self._remember(st, path)
            self._lookups[attrs.st_ino] = self._lookups.get(attrs.st_ino, 0) + 1
            return attrs

    async def forget(self, inode_list: list[tuple[int, int]]) -> None:
        for inode, nlookup in inode_list:
            left = self._lookups.get(inode, 0) - nlookup
            if left > 0:
                self._lookups[inode] = left
                continue
            self._lookups.pop(inode, None)
            if inode != pyfuse3.ROOT_INODE:
                self._paths.pop(inode, None)
                self._attrs.pop(inode, None)
                self._cache_keys.pop(inode, None)

    async def getattr(self, inode: int, ctx: pyfuse3.RequestContext | None = None) -> pyfuse3.EntryAttributes:
        cached = self._attrs.get(inode)
        if cached is not None and cached[0] > time.monotonic():
            self.stats.cache_hits["attr"] += 1
            return cached[1]
        path = self._path(inode)
        async with self._request("getattr", path):
            self.stats.cache_misses["attr"] += 1
            st = await self.nn.get_file_link_info(path)
            if st is None:
                raise pyfuse3.FUSEError(errno.ENOENT)
            return self._remember(st, path)

    async def readlink(self, inode: int, ctx: pyfuse3.RequestContext) -> bytes:
        path = self._path(inode)
        async with self._request("readlink", path):
            cached = self._attrs.get(inode)
            st = cached[2] if cached is not None else await self.nn.get_file_link_info(path)
            if st is None or st.fileType != IS_SYMLINK:
                raise pyfuse3.FUSEError(errno.EINVAL)
            return self._link_target(st.symlink)

    async def opendir(self, inode: int, ctx: pyfuse3.RequestContext) -> int:
        path = self._path(inode)
        async with self._request("opendir", path):
            entries = await self.nn.list_dir(path, max_pages=self.options.listing_page_cap)
            fh = self._next_fh
            self._next_fh += 1
            self._dirs[fh] = [(e.path, e) for e in entries]
            self._dir_paths[fh] = path
            return fh

    async def readdir(self, fh: int, start_id: int, token: pyfuse3.ReaddirToken) -> None:
        entries = self._dirs.get(fh)
        if entries is None:
            raise pyfuse3.FUSEError(errno.EBADF)
        parent = self._dir_paths[fh]
        for i in range(start_id, len(entries)):
            name, st = entries[i]
            path = self._join(parent, name.decode("utf-8", "surrogateescape"))
            attrs = self._attributes(st, self._inode(st))
            if not pyfuse3.readdir_reply(token, name, attrs, i + 1):
                break
            self._remember(st, path)
            self._lookups[attrs.st_ino] = self._lookups.get(attrs.st_ino, 0) + 1

    async def releasedir(self, fh: int) -> None:
        self._dirs.pop(fh, None)
        self._dir_paths.pop(fh, None)

    async def statfs(self, ctx: pyfuse3.RequestContext) -> pyfuse3.StatvfsData:
        async with self._request("statfs", self.root):
            fs = await self.nn.get_fs_stats()
        s = pyfuse3.StatvfsData()
        s.f_bsize = 128 * 1024
        s.f_frsize = 4096
        s.f_blocks = fs.capacity // s.f_frsize
        s.f_bfree = fs.remaining // s.f_frsize
        s.f_bavail = s.f_bfree
        s.f_files = 0
        s.f_ffree = 0
        s.f_favail = 0
        s.f_namemax = 255
        return s

    # ----- extended attributes --------------------------------------------------------------------

    def stats_snapshot(self) -> dict[str, object]:
        return snapshot(self.stats, self.nn.calls, self.nn.failovers)

    async def _status(self, inode: int) -> FileStatus:
        cached = self._attrs.get(inode)
        if cached is not None and cached[0] > time.monotonic():
            return cached[2]
        path = self._path(inode)
        st = await self.nn.get_file_link_info(path)
        if st is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        self._remember(st, path)
        return st

    async def listxattr(self, inode: int, ctx: pyfuse3.RequestContext) -> list[bytes]:
        if inode == pyfuse3.ROOT_INODE:
            return [STATS_XATTR]
        async with self._request("listxattr", self._path(inode)):
            st = await self._status(inode)
        return list(FILE_XATTRS) if st.fileType == IS_FILE else []

    async def getxattr(self, inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> bytes:
        if name not in FILE_XATTRS:
            if inode == pyfuse3.ROOT_INODE and name == STATS_XATTR:
                return json.dumps(self.stats_snapshot()).encode()
            if not name.startswith(b"user."):
                # No security labels or POSIX ACLs here. EOPNOTSUPP (not ENODATA) lets tools like
                # `ls -l` remember that for the whole mount instead of asking for every entry.
                raise pyfuse3.FUSEError(errno.EOPNOTSUPP)
            raise pyfuse3.FUSEError(pyfuse3.ENOATTR)
        path = self._path(inode)
        async with self._request("getxattr", path):
            st = await self._status(inode)
            if st.fileType != IS_FILE:
                raise pyfuse3.FUSEError(pyfuse3.ENOATTR)
            if name == b"user.hdfs.replication":
                return str(st.block_replication).encode()
            if name == b"user.hdfs.block_size":
                return str(st.blocksize).encode()
            lbs = await self.nn.get_block_locations(path, 0, WHOLE_FILE)
            blocks = [
                {"offset": b.offset, "length": b.b.numBytes,
                 "hosts": [f"{loc.id.hostName}:{loc.id.xferPort}" for loc in b.locs]}
                for b in lbs.blocks
            ]
            return json.dumps(blocks).encode()

    # ----- files ----------------------------------------------------------------------------------

    async def open(self, inode: int, flags: int, ctx: pyfuse3.RequestContext) -> pyfuse3.FileInfo:
        if flags & _WRITE_FLAGS:
            raise pyfuse3.FUSEError(errno.EROFS)
        path = self._path(inode)
        async with self._request("open", path):
            file = await self.client.open(path)
        key = (file.status.modification_time, file.length)
        keep = self._cache_keys.get(inode) == key
        self._cache_keys[inode] = key
        cached = self._attrs.get(inode)
        if cached is not None and cached[1].st_size != file.length:
            # A file being written: what can be read has moved past the size the kernel knows.
            # Update our attributes and make the kernel ask again before this open returns, so
            # the caller's next fstat (tail does one) sees the new size. Invalidating attributes
            # alone (no pages) takes no page or inode lock, so it cannot deadlock this request.
            attrs = self._remember(file.status, path)
            attrs.st_size = file.length
            self._invalidate_attributes(inode)
        fh = self._next_fh
        self._next_fh += 1
        self._files[fh] = _OpenFile(file, ReadaheadPlanner(max_window=self.options.readahead_max))
        return pyfuse3.FileInfo(fh=fh, direct_io=self.options.direct_io, keep_cache=keep and not self.options.direct_io)

    @staticmethod
    def _invalidate_attributes(inode: int) -> None:
        try:
            pyfuse3.invalidate_inode(inode, attr_only=True)
        except OSError as e:  # the kernel may have forgotten the inode already
            log.debug("invalidating attributes of inode %d: %s", inode, e)

    async def read(self, fh: int, off: int, size: int) -> bytes:
        handle = self._files.get(fh)
        if handle is None:
            raise pyfuse3.FUSEError(errno.EBADF)
        file = handle.file
        self.stats.fuse_reads += 1
        decision = handle.planner.plan(off, size, file.length)
        if decision.length == 0:
            return b""
        end = off + decision.length
        data: bytes | bytearray | memoryview | None = None
        try:  # the hot path: a bare cancel scope, the same bound and error translation as _request
            with trio.CancelScope(deadline=trio.current_time() + self.options.request_timeout):
                if decision.prefetch is not None:
                    self._start_prefetch(handle, *decision.prefetch)
                elif not decision.sequential:
                    self._drop_chunks(handle, before=None)
                data = await self._from_chunks(handle, off, end) if handle.chunks else None
                if data is None:
                    data = await self.client.fetch_range(file, off, decision.length)
                if handle.chunks:
                    self._drop_chunks(handle, before=off)
            if data is None:
                raise trio.TooSlowError
        except Exception as e:
            raise self._fuse_error("read", f"{file.path} [{off}, +{decision.length})", e) from None
        self.stats.app_bytes += len(data)
        return data  # type: ignore[return-value]  # pyfuse3 takes any contiguous buffer

    async def _from_chunks(self, handle: _OpenFile, start: int, end: int) -> bytes | memoryview | None:
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
        for chunk in covering:
            await chunk.done.wait()
            if chunk.data is None:
                return None  # the prefetch failed: read directly
            lo = max(start, chunk.offset) - chunk.offset
            hi = min(end, chunk.end) - chunk.offset
            parts.append(memoryview(chunk.data)[lo:hi])
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _start_prefetch(self, handle: _OpenFile, offset: int, length: int) -> None:
        if not self.budget.try_take(length):
            log.debug("%s: readahead budget exhausted; skipping a %d-byte prefetch", handle.file.path, length)
            handle.planner.frontier = offset  # let a later read try again
            return
        chunk = _Chunk(offset, length)
        handle.chunks.append(chunk)
        self._nursery.start_soon(self._prefetch, handle.file, chunk)

    async def _prefetch(self, file: HdfsFile, chunk: _Chunk) -> None:
        try:
            with chunk.cancel, trio.move_on_after(self.options.request_timeout):
                chunk.data = await self.client.fetch_range(file, chunk.offset, chunk.length)
        except (HdfsError, ProtocolError, OSError) as e:
            log.warning("%s: readahead of [%d, +%d) failed: %s", file.path, chunk.offset, chunk.length, e)
        finally:
            chunk.done.set()

    def _drop_chunks(self, handle: _OpenFile, before: int | None) -> None:
        """Free buffers wholly before `before` (consumed), or all of them (a seek, a release)."""
        keep = []
        for chunk in handle.chunks:
            if before is not None and chunk.end > before:
                keep.append(chunk)
                continue
            chunk.cancel.cancel()
            self.budget.give_back(chunk.length)
        handle.chunks = keep

    async def release(self, fh: int) -> None:
        handle = self._files.pop(fh, None)
        if handle is not None:
            self._drop_chunks(handle, before=None)
