"""What the kernel is told about files: attributes built from HDFS statuses, and the mount's own
attribute and negative-lookup caches (each entry lives `attr_timeout` / `negative_timeout`)."""

from __future__ import annotations

import os
import stat
import time

import pyfuse3

from hdfsfuse.conf.mount_options import MountOptions
from hdfsfuse.fuse.owners import OwnerIds
from hdfsfuse.namenode.client import FileStatus
from hdfsfuse.proto import hdfs_pb2

IS_DIR = hdfs_pb2.HdfsFileStatusProto.IS_DIR
IS_SYMLINK = hdfs_pb2.HdfsFileStatusProto.IS_SYMLINK
NEGATIVE_CACHE_MAX = 10_000  # remembered missing names, at most

Cached = tuple[float, pyfuse3.EntryAttributes, FileStatus]  # (expiry, attributes, the status they came from)


class Attributes:
    """Kernel attributes of HDFS statuses, cached per inode for `attr_timeout`."""

    def __init__(self, options: MountOptions, owners: OwnerIds, root: str, mountpoint: str) -> None:
        self.options = options
        self.owners = owners
        self.root = root
        self.mountpoint = mountpoint
        self._cached: dict[int, Cached] = {}

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
        self._cached[inode] = (fresh_until, attrs, st)
        return attrs

    def get(self, inode: int) -> Cached | None:
        """The cached entry of `inode`, fresh or not."""
        return self._cached.get(inode)

    def fresh(self, inode: int) -> Cached | None:
        """The cached entry of `inode` while it is within `attr_timeout`."""
        cached = self._cached.get(inode)
        return cached if cached is not None and cached[0] > time.monotonic() else None

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
