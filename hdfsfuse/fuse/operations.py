"""The read-only FUSE filesystem (pyfuse3 on trio). Does I/O through `HdfsClient`.

Owns the attribute, entry and negative-lookup caches, directory listings (paged as `ls`
reads them), open file handles with their readahead buffers, and the translation of every
error into one errno and one log line (`_fuse_error`). Inode numbers and the NameNode paths
behind them live in `inodes.InodeTable`: live files are asked about by inode path, so a rename
never stales them, and snapshot copies get inodes (and page caches) of their own.

Every request is bounded by `request_timeout`; no exception escapes a handler or a background
task (readahead), and a failed prefetch only makes its reads go to HDFS directly.
"""

from __future__ import annotations

import collections
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

from hdfsfuse.client import HdfsClient, HdfsFile
from hdfsfuse.conf.mount_options import MountOptions
from hdfsfuse.erasure.arrival import Arrival
from hdfsfuse.erasure.codec import policy_name
from hdfsfuse.errors import FileNotFound, HdfsError, to_errno
from hdfsfuse.fuse import xattrs
from hdfsfuse.fuse.callers import Identities
from hdfsfuse.fuse.inodes import ROOT_INODE, Entry, InodeTable
from hdfsfuse.fuse.readahead import ReadaheadBudget, ReadaheadPlanner, max_window, prefetch_pieces
from hdfsfuse.namenode.client import FileStatus, NameNodeClient
from hdfsfuse.namenode.viewfs import ViewNameNode
from hdfsfuse.proto import hdfs_pb2
from hdfsfuse.stats import snapshot

log = logging.getLogger(__name__)

IS_DIR = hdfs_pb2.HdfsFileStatusProto.IS_DIR
IS_SYMLINK = hdfs_pb2.HdfsFileStatusProto.IS_SYMLINK
IS_FILE = hdfs_pb2.HdfsFileStatusProto.IS_FILE
STATS_XATTR = b"user.hdfsfuse.stats"  # on the mount root: live stats as JSON
CHECKSUM_XATTR = b"user.hdfs.checksum"  # computed on demand by the DataNodes (no data read)
FILE_XATTRS = (b"user.hdfs.replication", b"user.hdfs.block_size", b"user.hdfs.blocks", CHECKSUM_XATTR)
EC_XATTR = b"user.hdfs.ec_policy"  # files and directories with an erasure-coding policy
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
NEGATIVE_CACHE_MAX = 10_000  # remembered missing names, at most
GROWING_ATTR_TIMEOUT = 1.0  # seconds the kernel keeps the size of a file being written
XATTR_SIZE_MAX = 65536  # the kernel's cap on one extended attribute value


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
    def known_user(name: str) -> int | None:
        """The local uid of exactly this user, or None (no fallback: for ACL entries)."""
        try:
            return pwd.getpwnam(name).pw_uid
        except KeyError:
            return None

    @staticmethod
    def known_group(name: str) -> int | None:
        try:
            return grp.getgrnam(name).gr_gid
        except KeyError:
            return None

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
    """A readahead buffer: file bytes [offset, offset+length), filled by a background task.
    An erasure-coded file's has an `arrival`: its first bytes can be read before the last land."""

    offset: int
    length: int
    done: trio.Event = field(default_factory=trio.Event)
    data: bytes | bytearray | None = None
    cancel: trio.CancelScope = field(default_factory=trio.CancelScope)
    arrival: Arrival | None = None

    @property
    def end(self) -> int:
        return self.offset + self.length


class _OpenFile:
    def __init__(self, inode: int, file: HdfsFile, planner: ReadaheadPlanner) -> None:
        self.inode = inode
        self.file = file
        self.planner = planner
        self.chunks: list[_Chunk] = []


class _Listing:
    """An open directory: one page of entries at a time, fetched as readdir walks on.

    Entry i of the whole listing is `page[i - base]`; readdir offsets are i + 1.
    """

    def __init__(self, directory: Entry, namenode: NameNodeClient) -> None:
        self.directory = directory
        self.namenode = namenode  # the opener's identity lists every page
        self.restart()

    def restart(self) -> None:
        self.page: list[tuple[bytes, FileStatus]] = []
        self.base = 0
        self.start_after = b""
        self.pages = 0
        self.done = False

    @property
    def end(self) -> int:
        return self.base + len(self.page)


class HdfsOperations(pyfuse3.Operations):
    supports_dot_lookup = False

    def __init__(self, client: HdfsClient, root: str, options: MountOptions, mountpoint: str,
                 nursery: trio.Nursery) -> None:
        super().__init__()
        self.client = client
        self.nn = client.namenode
        self.identities = Identities(options.identity, client.namenode, client.credentials, nursery)
        self.stats = client.stats
        self.root = root.rstrip("/") or "/"
        self.options = options
        self.mountpoint = os.path.abspath(mountpoint)
        self._nursery = nursery
        # When the kernel checks permissions (default_permissions), it also enforces the HDFS ACLs
        # this mount shows (FUSE's POSIX-ACL capability: system.posix_acl_access from getxattr).
        self.enable_acl = "default_permissions" in options.fuse_options("")
        self.ids = IdentityMap(
            options.uid if options.uid is not None else os.getuid(),
            options.gid if options.gid is not None else os.getgid(),
        )
        self.inodes = InodeTable(self.root, index_names=options.inotify)
        self._attrs: dict[int, tuple[float, pyfuse3.EntryAttributes, FileStatus]] = {}
        self._negative: dict[tuple[int, bytes], float] = {}
        self._dirs: dict[int, _Listing] = {}
        self._files: dict[int, _OpenFile] = {}
        self._open_inodes: dict[int, list[_OpenFile]] = {}  # inode -> its open handles
        self._next_fh = 1
        self._cache_keys: dict[int, tuple[int, int]] = {}  # inode -> (mtime, length) of the kept page cache
        self.budget = ReadaheadBudget(options.readahead_total)
        self._reads_waiting = 0  # reads past the inline try, awaiting their bytes

    # ----- helpers --------------------------------------------------------------------------------

    def _entry(self, inode: int) -> Entry:
        entry = self.inodes.get(inode)
        if entry is None:
            raise pyfuse3.FUSEError(errno.ESTALE)
        return entry

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

    def _store(self, inode: int, st: FileStatus) -> pyfuse3.EntryAttributes:
        """Cache and return the kernel attributes of `inode` from a fresh status."""
        attrs = self._attributes(st, inode)
        self._attrs[inode] = (time.monotonic() + self.options.attr_timeout, attrs, st)
        return attrs

    def forget_cached(self, inode: int | None, parent: int | None, name: str) -> None:
        """Drop our cached attributes of `inode` and `parent`, and a cached absence of `name` in
        `parent` (live invalidation: the NameNode says they changed)."""
        for known in (inode, parent):
            if known is not None:
                self._attrs.pop(known, None)
        if parent is not None:
            self._negative.pop((parent, name.encode("utf-8", "surrogateescape")), None)

    def _growing(self, inode: int) -> _OpenFile | None:
        """An open handle of `inode` whose file is being written, if any."""
        for handle in self._open_inodes.get(inode, ()):
            if handle.file.under_construction:
                return handle
        return None

    def _remember_missing(self, key: tuple[int, bytes]) -> None:
        if self.options.negative_timeout <= 0:
            return
        now = time.monotonic()
        if len(self._negative) >= NEGATIVE_CACHE_MAX:
            self._negative = {k: t for k, t in self._negative.items() if t > now}
            if len(self._negative) >= NEGATIVE_CACHE_MAX:  # still full: drop the older half
                keep = list(self._negative.items())[NEGATIVE_CACHE_MAX // 2 :]
                self._negative = dict(keep)
        self._negative[key] = now + self.options.negative_timeout

    def _link_target(self, raw: bytes) -> bytes:
        """Absolute HDFS link targets under the mount root point into the mount."""
        target = raw.decode("utf-8", "surrogateescape")
        if target.startswith("/"):
            if self.root == "/":
                return os.fsencode(self.mountpoint + target)
            if target == self.root or target.startswith(self.root + "/"):
                return os.fsencode(self.mountpoint + target[len(self.root) :])
        return os.fsencode(target)

    def _nn(self, ctx: pyfuse3.RequestContext | None) -> NameNodeClient:
        """The NameNode connection of the request's caller (`-o identity=`)."""
        if ctx is None:
            return self.nn
        return self.identities.namenode(ctx.uid, ctx.pid)

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
        if not isinstance(exc, HdfsError | OSError):
            log.error("%s %s: unexpected error %s: %s", op, what, type(exc).__name__, exc)
            log.debug("traceback of the unexpected error", exc_info=exc)
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
        # A viewfs mount table or a Router (no NameNode gives a directory fileId 0; a Router's
        # synthetic root has it): several namespaces, so entries are named by path.
        federated = isinstance(self.nn, ViewNameNode) or self.nn.router or st.fileId == 0
        self.inodes.set_root(st.fileId, by_path=federated)
        self._store(ROOT_INODE, st)

    async def lookup(self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        parent = self._entry(parent_inode)
        text = name.decode("utf-8", "surrogateescape")
        key = (parent_inode, name)
        async with self._request("lookup", f"{parent.shown}/{text}"):
            expiry = self._negative.get(key)
            if expiry is not None:
                if expiry > time.monotonic():
                    self.stats.cache_hits["negative"] += 1
                    raise pyfuse3.FUSEError(errno.ENOENT)
                del self._negative[key]
            self.stats.cache_misses["entry"] += 1
            st = await self._nn(ctx).get_file_link_info(self.inodes.child_path(parent, text))
            if st is None:
                self._remember_missing(key)
                raise pyfuse3.FUSEError(errno.ENOENT)
            inode = self.inodes.child(parent, text, st.fileId)
            attrs = self._store(inode, st)
            self.inodes.referenced(inode)
            return attrs

    async def forget(self, inode_list: list[tuple[int, int]]) -> None:
        for inode, nlookup in inode_list:
            if self.inodes.forget(inode, nlookup):
                self._attrs.pop(inode, None)
                self._cache_keys.pop(inode, None)

    async def getattr(self, inode: int, ctx: pyfuse3.RequestContext | None = None) -> pyfuse3.EntryAttributes:
        cached = self._attrs.get(inode)
        growing = self._growing(inode)
        if cached is not None and cached[0] > time.monotonic() and growing is None:
            self.stats.cache_hits["attr"] += 1
            return cached[1]
        entry = self._entry(inode)
        async with self._request("getattr", entry.shown):
            self.stats.cache_misses["attr"] += 1
            st = await self._nn(ctx).get_file_link_info(entry.nn_path)
            if st is None or (entry.file_id and not entry.by_inode and not entry.snapshot
                              and st.fileId != entry.file_id):  # federated: another file has its path now
                return self._gone(inode, entry, cached)
            attrs = self._store(inode, st)
            if growing is not None:
                # Being written: what can be read moves past the NameNode's length (hflush).
                try:
                    await self.client.grow(growing.file, strict=False)
                except HdfsError as e:
                    log.debug("%s: readable length not refreshed: %s", entry.shown, e)
                attrs.st_size = max(attrs.st_size, growing.file.length)
                attrs.st_blocks = -(-attrs.st_size // 512)
                attrs.attr_timeout = min(self.options.attr_timeout, GROWING_ATTR_TIMEOUT)
            return attrs

    def _gone(self, inode: int, entry: Entry,
              cached: tuple[float, pyfuse3.EntryAttributes, FileStatus] | None) -> pyfuse3.EntryAttributes:
        """getattr of an inode whose file no longer exists (deleted, or replaced by another file)."""
        if cached is not None and inode in self._open_inodes:
            return cached[1]  # still open: it keeps its last attributes, as a deleted local file does
        # ESTALE makes stat() look the name up again; a plain path lookup then finds what is there now.
        raise pyfuse3.FUSEError(errno.ENOENT if entry.snapshot else errno.ESTALE)

    async def readlink(self, inode: int, ctx: pyfuse3.RequestContext) -> bytes:
        entry = self._entry(inode)
        async with self._request("readlink", entry.shown):
            cached = self._attrs.get(inode)
            st = cached[2] if cached is not None else await self._nn(ctx).get_file_link_info(entry.nn_path)
            if st is None or st.fileType != IS_SYMLINK:
                raise pyfuse3.FUSEError(errno.EINVAL)
            return self._link_target(st.symlink)

    async def opendir(self, inode: int, ctx: pyfuse3.RequestContext) -> int:
        """Open a listing and fetch its first page (errors such as ENOTDIR show here)."""
        directory = self._entry(inode)
        async with self._request("opendir", directory.shown):
            listing = _Listing(directory, self._nn(ctx))
            await self._next_page(listing)
        fh = self._next_fh
        self._next_fh += 1
        self._dirs[fh] = listing
        return fh

    async def _next_page(self, listing: _Listing) -> None:
        """Move the listing to its next page of (at most) 1000 entries."""
        directory = listing.directory
        page = await listing.namenode.get_listing_page(directory.nn_path, listing.start_after)
        listing.pages += 1
        listing.base = listing.end
        listing.page = [(e.path, e) for e in page.partialListing]
        if listing.page:
            listing.start_after = listing.page[-1][0]
        listing.done = page.remainingEntries == 0 or not listing.page
        cap = self.options.listing_page_cap
        if not listing.done and cap is not None and listing.pages >= cap:
            log.warning(
                "%s: listing truncated at listing_page_cap=%d pages (%d entries shown, %d more not listed)",
                directory.shown, cap, listing.end, page.remainingEntries,
            )
            listing.done = True

    async def readdir(self, fh: int, start_id: int, token: pyfuse3.ReaddirToken) -> None:
        listing = self._dirs.get(fh)
        if listing is None:
            raise pyfuse3.FUSEError(errno.EBADF)
        directory = listing.directory
        async with self._request("readdir", directory.shown):
            if start_id < listing.base:  # rewinddir, or a seek back: list again from the start
                listing.restart()
                await self._next_page(listing)
            while True:
                while start_id >= listing.end and not listing.done:
                    await self._next_page(listing)
                if start_id >= listing.end:
                    return
                for i in range(start_id, listing.end):
                    name, st = listing.page[i - listing.base]
                    inode = self.inodes.child(directory, name.decode("utf-8", "surrogateescape"), st.fileId)
                    attrs = self._attributes(st, inode)
                    if not pyfuse3.readdir_reply(token, name, attrs, i + 1):
                        self.inodes.forget(inode, 0)  # not handed out: drop it unless referenced
                        return
                    # The kernel keeps these attributes for attr_timeout and asks no sooner, so they
                    # are not cached here: a huge listing costs one small inode entry per name.
                    self.inodes.referenced(inode)
                start_id = listing.end

    async def releasedir(self, fh: int) -> None:
        self._dirs.pop(fh, None)

    async def statfs(self, ctx: pyfuse3.RequestContext) -> pyfuse3.StatvfsData:
        async with self._request("statfs", self.root):
            fs = await self._nn(ctx).get_fs_stats()
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
        calls: collections.Counter[str] = collections.Counter()
        for nn in self.identities.clients:
            calls.update(nn.calls)
        failovers = sum(nn.failovers for nn in self.identities.clients)
        roles: collections.Counter[str] = collections.Counter()
        for nn in self.identities.clients:
            roles.update(nn.calls_by_role)
        return snapshot(self.stats, calls, failovers, self.client.context.replicas.snapshot(), roles)

    async def _status(self, inode: int, ctx: pyfuse3.RequestContext) -> FileStatus:
        cached = self._attrs.get(inode)
        if cached is not None and cached[0] > time.monotonic():
            return cached[2]
        st = await self._nn(ctx).get_file_link_info(self._entry(inode).nn_path)
        if st is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        self._store(inode, st)
        return st

    async def listxattr(self, inode: int, ctx: pyfuse3.RequestContext) -> list[bytes]:
        if inode == pyfuse3.ROOT_INODE:
            return [STATS_XATTR]
        entry = self._entry(inode)
        async with self._request("listxattr", entry.shown):
            st = await self._status(inode, ctx)
            hdfs_names = await xattrs.names(self._nn(ctx), entry.nn_path, st)
        names = (list(FILE_XATTRS) if st.fileType == IS_FILE else []) + xattrs.facts_for(st)
        if st.HasField("ecPolicy"):
            names.append(EC_XATTR)
        return names + [n for n in hdfs_names if n not in names]

    async def getxattr(self, inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> bytes:
        if name == EC_XATTR:
            async with self._request("getxattr", self._entry(inode).shown):
                st = await self._status(inode, ctx)
            if not st.HasField("ecPolicy"):
                raise pyfuse3.FUSEError(pyfuse3.ENOATTR)
            return policy_name(st.ecPolicy).encode()
        if name not in FILE_XATTRS:
            if inode == pyfuse3.ROOT_INODE and name == STATS_XATTR:
                return json.dumps(self.stats_snapshot()).encode()
            if name.startswith(b"user.") or name in xattrs.ACL_NAMES:
                return await self._hdfs_xattr(inode, name, ctx)
            # No security labels here. EOPNOTSUPP (not ENODATA) lets tools like `ls -l`
            # remember that for the whole mount instead of asking for every entry.
            raise pyfuse3.FUSEError(errno.EOPNOTSUPP)
        entry = self._entry(inode)
        async with self._request("getxattr", entry.shown):
            st = await self._status(inode, ctx)
            if st.fileType != IS_FILE:
                raise pyfuse3.FUSEError(pyfuse3.ENOATTR)
            if name == b"user.hdfs.replication":
                return str(st.block_replication).encode()
            if name == b"user.hdfs.block_size":
                return str(st.blocksize).encode()
            if name == CHECKSUM_XATTR:
                file = await self.client.open(entry.nn_path, namenode=self._nn(ctx))
                return (await self.client.file_checksum(file)).encode()
            window = 10 * (st.blocksize or 128 * 1024 * 1024)
            return await self._blocks_xattr(self._nn(ctx), entry.nn_path, entry.shown, window)

    async def _hdfs_xattr(self, inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> bytes:
        """A NameNode fact, an ACL or an HDFS user xattr (`hdfsfuse.fuse.xattrs`); ENODATA when none."""
        entry = self._entry(inode)
        async with self._request("getxattr", entry.shown):
            nn = self._nn(ctx)
            if name in xattrs.FACTS:
                value = await xattrs.fact_value(nn, entry.nn_path, await self._status(inode, ctx), name)
            elif name in xattrs.ACL_NAMES:
                st = await self._status(inode, ctx)
                value = await xattrs.acl_value(nn, entry.nn_path, st, name, self.ids.known_user,
                                               self.ids.known_group)
            else:
                value = await xattrs.user_value(nn, entry.nn_path, name[len(b"user.") :])
        if value is None:
            raise pyfuse3.FUSEError(pyfuse3.ENOATTR)
        return value

    async def _blocks_xattr(self, nn: NameNodeClient, nn_path: str, shown: str, window: int) -> bytes:
        """user.hdfs.blocks: the block list as JSON, fetched `window` bytes of file at a time.

        The kernel caps an xattr value at 64 KiB: a longer list is E2BIG, found without asking
        the NameNode for the whole file's locations.
        """
        blocks: list[dict[str, object]] = []
        size, offset = 2, 0
        while True:
            lbs = await nn.get_block_locations(nn_path, offset, window)
            fresh = [b for b in lbs.blocks if b.offset >= offset]
            for b in fresh:
                item: dict[str, object] = {"offset": b.offset, "length": b.b.numBytes,
                                           "hosts": [f"{loc.id.hostName}:{loc.id.xferPort}" for loc in b.locs]}
                if b.HasField("blockIndices"):  # a striped group: the internal block index on each host
                    item["indices"] = list(b.blockIndices)
                size += len(json.dumps(item)) + 2
                if size > XATTR_SIZE_MAX:
                    log.warning("%s: user.hdfs.blocks would be over %d bytes (E2BIG)", shown, XATTR_SIZE_MAX)
                    raise pyfuse3.FUSEError(errno.E2BIG)
                blocks.append(item)
            if not fresh or (lbs.HasField("lastBlock") and fresh[-1].b.blockId == lbs.lastBlock.b.blockId):
                return json.dumps(blocks).encode()
            offset = fresh[-1].offset + max(1, fresh[-1].b.numBytes)

    # ----- files ----------------------------------------------------------------------------------

    async def open(self, inode: int, flags: int, ctx: pyfuse3.RequestContext) -> pyfuse3.FileInfo:
        if flags & _WRITE_FLAGS:
            raise pyfuse3.FUSEError(errno.EROFS)
        entry = self._entry(inode)
        async with self._request("open", entry.shown):
            if entry.by_inode:
                path, file_id = entry.shown, self.inodes.root_file_id if inode == ROOT_INODE else inode
            elif entry.snapshot:
                path, file_id = entry.nn_path, 0  # a snapshot copy: its path is immutable
            else:
                path, file_id = entry.nn_path, entry.file_id  # federated: by path, but still this file
            try:
                # Exactly this inode's file, checked by the NameNode as the caller.
                file = await self.client.open(path, file_id=file_id, namenode=self._nn(ctx))
            except FileNotFound:
                if not file_id:
                    raise
                # The kernel's name still points at a file deleted or replaced since: ESTALE
                # makes the VFS look the name up again and open what is there now.
                raise pyfuse3.FUSEError(errno.ESTALE) from None
        key = (file.status.modification_time, file.length)
        keep = self._cache_keys.get(inode) == key
        self._cache_keys[inode] = key
        cached = self._attrs.get(inode)
        if cached is None or cached[1].st_size != file.length:
            # The size the kernel knows may be stale (a file being written, or one that changed
            # since a listing showed it). Update our attributes and make the kernel ask again
            # before this open returns, so the caller's next fstat (tail does one) sees the
            # size. Invalidating attributes alone (no pages) takes no page or inode lock, so it
            # cannot deadlock this request.
            attrs = self._store(inode, file.status)
            attrs.st_size = file.length
            attrs.st_blocks = -(-file.length // 512)
            self._invalidate_attributes(inode)
        fh = self._next_fh
        self._next_fh += 1
        units = file.ec_policy.data_units if file.ec_policy is not None else 1
        window = max_window(self.options.readahead_max, units, self.options.readahead_total)
        handle = self._files[fh] = _OpenFile(inode, file, ReadaheadPlanner(max_window=window))
        self._open_inodes.setdefault(inode, []).append(handle)
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
        data: bytes | bytearray | memoryview | None = None
        try:  # the hot path: bare cancel scopes, the same bound and error translation as _request
            if file.under_construction and off + size > file.length:
                with trio.CancelScope(deadline=trio.current_time() + self.options.request_timeout):
                    await self.client.grow(file, strict=off >= file.length)
            decision = handle.planner.plan(off, size, file.length)
            if decision.length == 0:
                return b""
            tried = decision.prefetch is None and not handle.chunks
            if tried:  # the block cache's or a local replica's files: no await; alone, it may poll a disk
                data = self.client.read_now(file, off, decision.length, poll=self._reads_waiting == 0)
            if data is None:
                self._reads_waiting += 1
                try:
                    with trio.CancelScope(deadline=trio.current_time() + self.options.request_timeout):
                        end = off + decision.length
                        if decision.prefetch is not None:
                            self._start_prefetch(handle, *decision.prefetch)
                        elif not decision.sequential:
                            self._drop_chunks(handle, before=None)
                        data = await self._from_chunks(handle, off, end) if handle.chunks else None
                        if data is None:
                            data = await self.client.fetch_range(file, off, decision.length, inline_tried=tried)
                        if handle.chunks:
                            self._drop_chunks(handle, before=off)
                finally:
                    self._reads_waiting -= 1
                if data is None:
                    raise trio.TooSlowError
        except Exception as e:
            raise self._fuse_error("read", f"{file.path} [{off}, +{size})", e) from None
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
            lo = max(start, chunk.offset) - chunk.offset
            hi = min(end, chunk.end) - chunk.offset
            if chunk.arrival is not None and not chunk.done.is_set() and await chunk.arrival.wait_for(hi):
                data = chunk.arrival.buffer  # its bytes up to `hi` have landed, verified
            else:
                await chunk.done.wait()
                data = chunk.data
            if data is None:
                return None  # the prefetch failed: read directly
            parts.append(memoryview(data)[lo:hi])
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _start_prefetch(self, handle: _OpenFile, offset: int, length: int) -> None:
        if not self.budget.try_take(length):
            log.debug("%s: readahead budget exhausted; skipping a %d-byte prefetch", handle.file.path, length)
            handle.planner.frontier = offset  # let a later read try again
            return
        # A striped file's prefetch fans out over its data units already: one read, whose
        # first bytes are read as they land (its arrival).
        striped = handle.file.ec_policy is not None
        parts = [(offset, length)] if striped else prefetch_pieces(offset, length)
        for start, n in parts:
            chunk = _Chunk(start, n, arrival=Arrival() if striped else None)
            handle.chunks.append(chunk)
            self._nursery.start_soon(self._prefetch, handle.file, chunk)

    async def _prefetch(self, file: HdfsFile, chunk: _Chunk) -> None:
        """A background read: whatever it raises is logged here; its reads then go to HDFS directly."""
        try:
            with chunk.cancel, trio.move_on_after(self.options.request_timeout):
                chunk.data = await self.client.fetch_range(file, chunk.offset, chunk.length, arrival=chunk.arrival)
        except Exception as e:
            log.warning("%s: readahead of [%d, +%d) failed (%s: %s); reading directly",
                        file.path, chunk.offset, chunk.length, type(e).__name__, e)
        finally:
            chunk.done.set()
            if chunk.arrival is not None:
                chunk.arrival.finish()

    def _drop_chunks(self, handle: _OpenFile, before: int | None) -> None:
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

    async def release(self, fh: int) -> None:
        handle = self._files.pop(fh, None)
        if handle is not None:
            self._drop_chunks(handle, before=None)
            handles = self._open_inodes[handle.inode]
            handles.remove(handle)
            if not handles:
                del self._open_inodes[handle.inode]
