"""What the kernel is told about files: attributes built from HDFS statuses, and the mount's own
attribute and negative-lookup caches (each entry lives `attr_timeout` / `negative_timeout`)."""

from __future__ import annotations

import collections
import os
import stat
import time
from collections.abc import Callable

import pyfuse3

from hdfsfuse.conf.mount_options import MountOptions
from hdfsfuse.fuse.owners import OwnerIds
from hdfsfuse.namenode.client import FileStatus
from hdfsfuse.proto import hdfs_pb2

IS_DIR = hdfs_pb2.HdfsFileStatusProto.IS_DIR
IS_SYMLINK = hdfs_pb2.HdfsFileStatusProto.IS_SYMLINK
NEGATIVE_CACHE_MAX = 10_000  # remembered missing names, at most
DROPS_PER_STORE = 8  # expired attribute entries looked at per store (each store adds one)


class Cached:
    """One inode's cached attributes and the status they came from, kept serialized (a parsed
    status costs about ten times its bytes, and a loader's mount holds one per file)."""

    __slots__ = ("_status", "attrs", "expiry")

    def __init__(self, expiry: float, attrs: pyfuse3.EntryAttributes, status: bytes) -> None:
        self.expiry = expiry
        self.attrs = attrs
        self._status = status

    @property
    def status(self) -> FileStatus:
        return FileStatus.FromString(self._status)


class Attributes:
    """Kernel attributes of HDFS statuses, cached per inode for `attr_timeout`.

    An entry is dropped once it expires, unless its inode is open (`is_open`): an open file keeps
    its last attributes, which stat shows if the file is deleted under it. So the cache holds
    about the inodes of the last `attr_timeout`, not every inode the kernel still knows."""

    def __init__(self, options: MountOptions, owners: OwnerIds, root: str, mountpoint: str,
                 is_open: Callable[[int], bool]) -> None:
        self.options = options
        self.owners = owners
        self.root = root
        self.mountpoint = mountpoint
        self.is_open = is_open
        self._cached: collections.OrderedDict[int, Cached] = collections.OrderedDict()  # oldest store first

    def __len__(self) -> int:
        return len(self._cached)

    def build(self, st: FileStatus, inode: int) -> pyfuse3.EntryAttributes:
        a = pyfuse3.EntryAttributes()
        perm = st.permission.perm & 0o7777
        if st.fileType == IS_DIR:
            a.st_mode = stat.S_IFDIR | perm
            a.st_nlink = 2
            a.st_size = 0
        elif st.fileType == IS_SYMLINK:
            a.st_mode = stat.S_IFLNK | 0o777
            a.st_nlink = 1
            a.st_size = len(self.link_target(st.symlink))
        else:
            a.st_mode = stat.S_IFREG | perm
            a.st_nlink = 1
            a.st_size = st.length
        a.st_ino = inode
        a.st_uid = self.owners.user(st.owner)
        a.st_gid = self.owners.group(st.group)
        a.st_mtime_ns = st.modification_time * 1_000_000
        a.st_ctime_ns = a.st_mtime_ns
        a.st_atime_ns = (st.access_time or st.modification_time) * 1_000_000
        a.st_blksize = 128 * 1024
        a.st_blocks = -(-a.st_size // 512)
        a.entry_timeout = self.options.entry_timeout
        a.attr_timeout = self.options.attr_timeout
        a.generation = 0
        return a

    def link_target(self, raw: bytes) -> bytes:
        """Absolute HDFS link targets under the mount root point into the mount."""
        target = raw.decode("utf-8", "surrogateescape")
        if target.startswith("/"):
            if self.root == "/":
                return os.fsencode(self.mountpoint + target)
            if target == self.root or target.startswith(self.root + "/"):
                return os.fsencode(self.mountpoint + target[len(self.root) :])
        return os.fsencode(target)

    def store(self, inode: int, st: FileStatus, expiry: float | None = None) -> pyfuse3.EntryAttributes:
        """Cache and return the kernel attributes of `inode` from a status the NameNode gave
        now, or (with `expiry`) one kept since that is trusted until then."""
        attrs = self.build(st, inode)
        now = time.monotonic()
        fresh_until = now + self.options.attr_timeout
        if expiry is not None and expiry < fresh_until:
            # A kept status: the kernel keeps it no longer than it is trusted here.
            fresh_until = expiry
            attrs.attr_timeout = max(0.0, expiry - now)
            attrs.entry_timeout = min(attrs.entry_timeout, attrs.attr_timeout)
        self._cached[inode] = Cached(fresh_until, attrs, st.SerializeToString())
        self._cached.move_to_end(inode)
        self._drop_expired(now)
        return attrs

    def _drop_expired(self, now: float) -> None:
        """Drop the oldest entries while they have expired (an open inode's goes to the back), a
        few per store: as many files held open as you like cost a store no more."""
        for _ in range(min(len(self._cached), DROPS_PER_STORE)):
            inode, oldest = next(iter(self._cached.items()))
            if oldest.expiry > now:
                return
            if self.is_open(inode):
                self._cached.move_to_end(inode)
            else:
                del self._cached[inode]

    def get(self, inode: int) -> Cached | None:
        """The cached entry of `inode`, fresh or not (kept while the inode is open)."""
        return self._cached.get(inode)

    def fresh(self, inode: int) -> Cached | None:
        """The cached entry of `inode` while it is within `attr_timeout`."""
        cached = self._cached.get(inode)
        return cached if cached is not None and cached.expiry > time.monotonic() else None

    def forget(self, inode: int) -> None:
        self._cached.pop(inode, None)


class NegativeCache:
    """Names known to be missing, for `negative_timeout`; bounded to `capacity` names."""

    def __init__(self, timeout: float, capacity: int = NEGATIVE_CACHE_MAX) -> None:
        self.timeout = timeout
        self.capacity = capacity
        self.expiries: dict[tuple[int, bytes], float] = {}  # (parent inode, name) -> expiry

    def __len__(self) -> int:
        return len(self.expiries)

    def __contains__(self, key: tuple[int, bytes]) -> bool:
        return key in self.expiries

    def missing(self, key: tuple[int, bytes]) -> bool:
        """Whether the name is known to be missing now (an expired entry is dropped)."""
        expiry = self.expiries.get(key)
        if expiry is None:
            return False
        if expiry > time.monotonic():
            return True
        del self.expiries[key]
        return False

    def remember(self, key: tuple[int, bytes]) -> None:
        if self.timeout <= 0:
            return
        now = time.monotonic()
        if len(self.expiries) >= self.capacity:
            self.expiries = {k: t for k, t in self.expiries.items() if t > now}
            if len(self.expiries) >= self.capacity:  # still full: drop the older half
                self.expiries = dict(list(self.expiries.items())[self.capacity // 2 :])
        self.expiries[key] = now + self.timeout

    def forget(self, key: tuple[int, bytes]) -> None:
        self.expiries.pop(key, None)
