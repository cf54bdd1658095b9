"""The read-only FUSE filesystem (pyfuse3 on trio): the request handlers. Does I/O through `HdfsClient`.

The handlers keep no state of their own beyond the parts they are built with: inode numbers and
the NameNode paths behind them (`inodes`: live files are asked about by inode path, so a rename
never stales them, and snapshot copies get inodes and page caches of their own), kernel
attributes and the negative-lookup cache (`attributes`, forgotten with the kept names and
locations through `caches` when a file leaves its name), directory listings (`listings`), open
handles and their readahead (`handles`), extended attributes (`xattrs`), the caller's NameNode
connection (`callers`) and the one error boundary (`boundary`).

Every request is bounded by `request_timeout`; no exception escapes a handler or a background
task (readahead).
"""

from __future__ import annotations

import collections
import errno
import logging
import os
import time

import pyfuse3
import trio

from hdfsfuse.client import HdfsClient
from hdfsfuse.conf.mount_options import MountOptions
from hdfsfuse.errors import FileNotFound, HdfsError
from hdfsfuse.fuse.attributes import IS_DIR, IS_SYMLINK, Attributes, NegativeCache
from hdfsfuse.fuse.boundary import RequestBoundary
from hdfsfuse.fuse.caches import MountCaches
from hdfsfuse.fuse.callers import Identities
from hdfsfuse.fuse.handles import OpenFile, OpenFiles, Readahead
from hdfsfuse.fuse.inodes import ROOT_INODE, Entry, InodeTable
from hdfsfuse.fuse.kept import KeptMetadata
from hdfsfuse.fuse.listings import Listing
from hdfsfuse.fuse.names import NameCache
from hdfsfuse.fuse.owners import OwnerIds
from hdfsfuse.fuse.readahead import ReadaheadBudget, ReadaheadPlanner, max_window
from hdfsfuse.fuse.xattrs import ExtendedAttributes
from hdfsfuse.namenode.client import FileStatus, NameNodeClient
from hdfsfuse.namenode.viewfs import ViewNameNode
from hdfsfuse.proto import hdfs_pb2
from hdfsfuse.stats import snapshot

log = logging.getLogger(__name__)

IS_FILE = hdfs_pb2.HdfsFileStatusProto.IS_FILE
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
GROWING_ATTR_TIMEOUT = 1.0  # seconds the kernel keeps the size of a file being written


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
        # When the kernel checks permissions (default_permissions), it also enforces the HDFS ACLs
        # this mount shows (FUSE's POSIX-ACL capability: system.posix_acl_access from getxattr).
        self.enable_acl = "default_permissions" in options.fuse_options("")
        self.owners = OwnerIds(
            options.uid if options.uid is not None else os.getuid(),
            options.gid if options.gid is not None else os.getgid(),
        )
        self.inodes = InodeTable(self.root, index_names=options.inotify)
        self.handles = OpenFiles()
        self.attributes = Attributes(options, self.owners, self.root, os.path.abspath(mountpoint),
                                     self.handles.is_open)
        self.negative = NegativeCache(options.negative_timeout)
        # Names and statuses from listings and lookups, for the mount's own identity only (a
        # caller's permissions are the NameNode's to check, per request).
        self.names = NameCache(options.entry_timeout, options.metadata_entries if options.identity == "mount" else 0)
        self.kept = KeptMetadata(self.names, client.located, self.nn, self.inodes, self.stats)
        # What a change makes stale, forgotten together (here, and by `-o inotify`).
        self.caches = MountCaches(self.inodes, self.attributes, self.negative, self.names, client.located)
        self.boundary = RequestBoundary(options.request_timeout)
        self.readahead = Readahead(client.fetch_stored, ReadaheadBudget(options.readahead_total),
                                   options.request_timeout, self.stats, nursery)
        self.xattrs = ExtendedAttributes(self, client, self.stats_snapshot)
        self._dirs: dict[int, Listing] = {}
        self._next_fh = 1
        self._cache_keys: dict[int, tuple[int, int, int]] = {}  # inode -> `HdfsFile.version` of the kept page cache
        self._reads_waiting = 0  # reads past the inline try, awaiting their bytes

    def entry(self, inode: int) -> Entry:
        entry = self.inodes.get(inode)
        if entry is None:
            raise pyfuse3.FUSEError(errno.ESTALE)
        return entry

    def caller_namenode(self, ctx: pyfuse3.RequestContext | None) -> NameNodeClient:
        """The NameNode connection of the request's caller (`-o identity=`)."""
        if ctx is None:
            return self.nn
        return self.identities.namenode(ctx.uid, ctx.pid)

    def _new_fh(self) -> int:
        fh = self._next_fh
        self._next_fh += 1
        return fh

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
        self.attributes.store(ROOT_INODE, st)

    async def lookup(self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        parent = self.entry(parent_inode)
        text = name.decode("utf-8", "surrogateescape")
        key = (parent_inode, name)
        with self.boundary.request("lookup", parent, text):
            if self.negative.missing(key):
                self.stats.cache_hits["negative"] += 1
                raise pyfuse3.FUSEError(errno.ENOENT)
            known = await self.kept.lookup(parent, name)
            if known is not None:
                self.stats.cache_hits["entry"] += 1
                expiry, st = known
            else:
                self.stats.cache_misses["entry"] += 1
                now = time.monotonic()
                found = await self.caller_namenode(ctx).get_file_link_info(self.inodes.child_path(parent, text))
                self.names.looked_up(parent_inode, now, found=found is not None)
                if found is None:
                    self.negative.remember(key)
                    raise pyfuse3.FUSEError(errno.ENOENT)
                st, expiry = found, None
                self.names.store(parent_inode, parent.shown, [(name, st)], now)
            inode = self.inodes.child(parent, text, st.fileId)
            attrs = self.attributes.store(inode, st, expiry)
            self.inodes.referenced(inode)
            return attrs

    async def forget(self, inode_list: list[tuple[int, int]]) -> None:
        for inode, nlookup in inode_list:
            if self.inodes.forget(inode, nlookup):
                self.attributes.forget(inode)
                self._cache_keys.pop(inode, None)

    async def getattr(self, inode: int, ctx: pyfuse3.RequestContext | None = None) -> pyfuse3.EntryAttributes:
        growing = self.handles.growing(inode)
        fresh = self.attributes.fresh(inode)
        if fresh is not None and growing is None:
            self.stats.cache_hits["attr"] += 1
            return fresh.attrs
        cached = self.attributes.get(inode)
        entry = self.entry(inode)
        with self.boundary.request("getattr", entry):
            self.stats.cache_misses["attr"] += 1
            st = await self.caller_namenode(ctx).get_file_link_info(entry.nn_path)
            if st is None or (entry.file_id and not entry.by_inode and not entry.snapshot
                              and st.fileId != entry.file_id):  # federated: another file has its path now
                self.caches.forget_entry(entry)
                if cached is not None and self.handles.is_open(inode):
                    return cached.attrs  # still open: it keeps its last attributes, as a deleted local file does
                # ESTALE makes stat() look the name up again; a plain path lookup then finds what is there now.
                raise pyfuse3.FUSEError(errno.ENOENT if entry.snapshot else errno.ESTALE)
            attrs = self.attributes.store(inode, st)
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

    async def readlink(self, inode: int, ctx: pyfuse3.RequestContext) -> bytes:
        entry = self.entry(inode)
        with self.boundary.request("readlink", entry):
            cached = self.attributes.get(inode)
            if cached is not None:
                st = cached.status
            else:
                st = await self.caller_namenode(ctx).get_file_link_info(entry.nn_path)
            if st is None or st.fileType != IS_SYMLINK:
                raise pyfuse3.FUSEError(errno.EINVAL)
            return self.attributes.link_target(st.symlink)

    async def opendir(self, inode: int, ctx: pyfuse3.RequestContext) -> int:
        """Open a listing and fetch its first page (errors such as ENOTDIR show here)."""
        directory = self.entry(inode)
        with self.boundary.request("opendir", directory):
            listing = Listing(directory, self.caller_namenode(ctx), self.options.listing_page_cap)
            await self._next_page(listing)
        fh = self._new_fh()
        self._dirs[fh] = listing
        return fh

    async def readdir(self, fh: int, start_id: int, token: pyfuse3.ReaddirToken) -> None:
        listing = self._dirs.get(fh)
        if listing is None:
            raise pyfuse3.FUSEError(errno.EBADF)
        directory = listing.directory
        with self.boundary.request("readdir", directory):
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
                    if not pyfuse3.readdir_reply(token, name, self.attributes.build(st, inode), i + 1):
                        self.inodes.forget(inode, 0)  # not handed out: drop it unless referenced
                        return
                    # The kernel keeps these attributes for attr_timeout and asks no sooner, so they
                    # are not cached here: a huge listing costs one small inode entry per name.
                    self.inodes.referenced(inode)
                start_id = listing.end

    async def _next_page(self, listing: Listing) -> None:
        """The listing's next page; its statuses answer lookups of its names for a while."""
        start_after = listing.start_after
        now = time.monotonic()
        await listing.next_page()
        directory = listing.directory
        self.names.store(directory.inode, directory.shown, listing.page, now)
        self.names.listed(directory.inode, start_after, [st for _, st in listing.page])

    async def releasedir(self, fh: int) -> None:
        self._dirs.pop(fh, None)

    async def statfs(self, ctx: pyfuse3.RequestContext) -> pyfuse3.StatvfsData:
        with self.boundary.request("statfs", self.root):
            fs = await self.caller_namenode(ctx).get_fs_stats()
        s = pyfuse3.StatvfsData()
        s.f_bsize = 128 * 1024
        s.f_frsize = 4096
        s.f_blocks = fs.capacity // s.f_frsize
        s.f_bfree = fs.remaining // s.f_frsize
        s.f_bavail = s.f_bfree
        s.f_files = s.f_ffree = s.f_favail = 0
        s.f_namemax = 255
        return s

    # ----- extended attributes --------------------------------------------------------------------

    def stats_snapshot(self) -> dict[str, object]:
        calls: collections.Counter[str] = collections.Counter()
        roles: collections.Counter[str] = collections.Counter()
        for nn in self.identities.clients:
            calls.update(nn.calls)
            roles.update(nn.calls_by_role)
        failovers = sum(nn.failovers for nn in self.identities.clients)
        gauges: dict[str, object] = {"open_files": len(self.handles.files), "open_directories": len(self._dirs),
                                     "kept_names": len(self.names), "kept_locations": len(self.client.located)}
        return {**gauges, **snapshot(self.stats, calls, failovers, self.client.context.replicas.snapshot(), roles)}

    async def listxattr(self, inode: int, ctx: pyfuse3.RequestContext) -> list[bytes]:
        return await self.xattrs.list(inode, ctx)

    async def getxattr(self, inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> bytes:
        return await self.xattrs.get(inode, name, ctx)

    # ----- files ----------------------------------------------------------------------------------

    async def open(self, inode: int, flags: int, ctx: pyfuse3.RequestContext) -> pyfuse3.FileInfo:
        if flags & _WRITE_FLAGS:
            raise pyfuse3.FUSEError(errno.EROFS)
        entry = self.entry(inode)
        with self.boundary.request("open", entry):
            if entry.by_inode:
                path, file_id = entry.shown, self.inodes.root_file_id if inode == ROOT_INODE else inode
            elif entry.snapshot:
                path, file_id = entry.nn_path, 0  # a snapshot copy: its path is immutable
            else:
                path, file_id = entry.nn_path, entry.file_id  # federated: by path, but still this file
            known = await self._known_status(entry, file_id) if entry.by_inode and self.names.enabled else None
            try:
                # Exactly this inode's file, checked by the NameNode as the caller (or, for the
                # mount's identity, as a listing or lookup described it moments ago).
                file = await self.client.open(path, file_id=file_id, namenode=self.caller_namenode(ctx), known=known)
            except FileNotFound:
                self.caches.forget_entry(entry)
                if not file_id:
                    raise
                # The kernel's name still points at a file deleted or replaced since: ESTALE
                # makes the VFS look the name up again and open what is there now.
                raise pyfuse3.FUSEError(errno.ESTALE) from None
        key = file.version
        keep = self._cache_keys.get(inode) == key
        self._cache_keys[inode] = key
        cached = self.attributes.get(inode)
        if cached is None or cached.attrs.st_size != file.length:
            # The size the kernel knows may be stale (a file being written, or one that changed
            # since a listing showed it). Update our attributes and make the kernel ask again
            # before this open returns, so the caller's next fstat (tail does one) sees the
            # size. Invalidating attributes alone (no pages) takes no page or inode lock, so it
            # cannot deadlock this request.
            attrs = self.attributes.store(inode, file.status)
            attrs.st_size = file.length
            attrs.st_blocks = -(-file.length // 512)
            _invalidate_attributes(inode)
        units = file.ec_policy.data_units if file.ec_policy is not None else 1
        window = max_window(self.options.readahead_max, units, self.options.readahead_total)
        fh = self._new_fh()
        self.handles.add(fh, OpenFile(inode, file, ReadaheadPlanner(max_window=window)))
        return pyfuse3.FileInfo(fh=fh, direct_io=self.options.direct_io, keep_cache=keep and not self.options.direct_io)

    async def _known_status(self, entry: Entry, file_id: int) -> FileStatus | None:
        """The status of the file `entry` names, if still trusted (`Attributes.fresh`)."""
        cached = self.attributes.fresh(entry.inode)
        return await self.kept.for_open(entry, file_id, cached.status) if cached is not None else None

    async def read(self, fh: int, off: int, size: int) -> bytes:
        handle = self.handles.files.get(fh)
        if handle is None:
            raise pyfuse3.FUSEError(errno.EBADF)
        file = handle.file
        self.stats.fuse_reads += 1
        data: bytes | bytearray | memoryview | None = None
        try:  # the hot path: bare cancel scopes instead of `boundary.request`, the same bound and translation
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
                data = await self._read_waiting(handle, off, decision.length, decision.prefetch,
                                                decision.sequential, tried)
        except Exception as e:
            raise self.boundary.error("read", f"{file.path} [{off}, +{size})", e) from None
        self.stats.app_bytes += len(data)
        return data  # type: ignore[return-value]  # pyfuse3 takes any contiguous buffer

    async def _read_waiting(self, handle: OpenFile, off: int, length: int, prefetch: tuple[int, int] | None,
                            sequential: bool, tried: bool) -> bytes | bytearray | memoryview:
        """A read that awaits its bytes: from readahead buffers, else from HDFS, within the bound."""
        data = None
        self._reads_waiting += 1
        try:
            with trio.CancelScope(deadline=trio.current_time() + self.options.request_timeout):
                if prefetch is not None:
                    self.readahead.start(handle, *prefetch)
                elif not sequential:
                    self.readahead.drop(handle, before=None)
                data = await self.readahead.take(handle, off, off + length) if handle.chunks else None
                if data is None:
                    data = await self.client.fetch_range(handle.file, off, length, inline_tried=tried)
                if handle.chunks:
                    self.readahead.drop(handle, before=off)
        finally:
            self._reads_waiting -= 1
        if data is None:
            raise trio.TooSlowError
        return data

    async def release(self, fh: int) -> None:
        handle = self.handles.pop(fh)
        if handle is not None:
            self.readahead.drop(handle, before=None)


def _invalidate_attributes(inode: int) -> None:
    try:
        pyfuse3.invalidate_inode(inode, attr_only=True)
    except OSError as e:  # the kernel may have forgotten the inode already
        log.debug("invalidating attributes of inode %d: %s", inode, e)
