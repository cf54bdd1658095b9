"""The FUSE floor for the benchmarks: a pyfuse3 daemon that answers reads from memory, no HDFS.

    python -m tests.bench.noop_fs MOUNTPOINT --file /bench/big=SIZE [--file ...] [--direct-io]

Serves the given files (zero bytes, read-only) under the same paths as the HDFS data sets, so
the same worker and offsets run against it. Whatever a read through it costs is what FUSE and
pyfuse3 alone cost on this machine: every hdfsfuse mount figure can be read against it.
"""

from __future__ import annotations

import argparse
import errno
import os
import stat

import pyfuse3
import trio

ROOT = pyfuse3.ROOT_INODE
ZEROS = bytes(1 << 20)  # the largest FUSE read is 1 MiB


class NoopFs(pyfuse3.Operations):
    def __init__(self, files: dict[str, int], direct_io: bool) -> None:
        super().__init__()
        self.direct_io = direct_io
        self.children: dict[int, dict[bytes, int]] = {ROOT: {}}
        self.sizes: dict[int, int] = {}
        next_inode = ROOT + 1
        for path, size in files.items():
            parent = ROOT
            parts = path.strip("/").split("/")
            for i, part in enumerate(parts):
                name = part.encode()
                child = self.children[parent].get(name)
                if child is None:
                    child, next_inode = next_inode, next_inode + 1
                    self.children[parent][name] = child
                    if i < len(parts) - 1:
                        self.children[child] = {}
                    else:
                        self.sizes[child] = size
                parent = child

    def _attrs(self, inode: int) -> pyfuse3.EntryAttributes:
        a = pyfuse3.EntryAttributes()
        a.st_ino = inode
        if inode in self.children:
            a.st_mode, a.st_nlink, a.st_size = stat.S_IFDIR | 0o755, 2, 0
        else:
            a.st_mode, a.st_nlink, a.st_size = stat.S_IFREG | 0o444, 1, self.sizes[inode]
        a.st_uid, a.st_gid = os.getuid(), os.getgid()
        a.entry_timeout = a.attr_timeout = 60
        return a

    async def lookup(self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        child = self.children.get(parent_inode, {}).get(name)
        if child is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        return self._attrs(child)

    async def getattr(self, inode: int, ctx: pyfuse3.RequestContext | None = None) -> pyfuse3.EntryAttributes:
        return self._attrs(inode)

    async def open(self, inode: int, flags: int, ctx: pyfuse3.RequestContext) -> pyfuse3.FileInfo:
        if inode not in self.sizes:
            raise pyfuse3.FUSEError(errno.EISDIR)
        return pyfuse3.FileInfo(fh=inode, direct_io=self.direct_io, keep_cache=False)

    async def read(self, fh: int, off: int, size: int) -> bytes:
        n = max(0, min(size, self.sizes[fh] - off))
        return memoryview(ZEROS)[:n]  # type: ignore[return-value]

    async def release(self, fh: int) -> None:
        return None


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("mountpoint")
    p.add_argument("--file", action="append", default=[], help="PATH=SIZE")
    p.add_argument("--direct-io", action="store_true")
    a = p.parse_args()
    files = {path: int(size) for path, size in (f.rsplit("=", 1) for f in a.file)}
    pyfuse3.init(NoopFs(files, a.direct_io), a.mountpoint, {"ro", "fsname=hdfsfuse-floor", "subtype=noop"})
    try:
        trio.run(pyfuse3.main)
    finally:
        pyfuse3.close(unmount=True)


if __name__ == "__main__":
    main()
