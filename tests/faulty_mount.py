"""hdfsfuse with injected faults, for tests only: `python -m tests.faulty_mount mount ...`.

The real CLI and daemon, with `HdfsClient.fetch_stored` (under every read and prefetch) patched so that:
- a read of a file whose name contains `boom-read` raises RuntimeError (a bug in a handler);
- a readahead prefetch of a file whose name contains `boom-prefetch` raises RuntimeError inside
  the background task (a bug in a background task).
"""

from __future__ import annotations

import sys

import trio

from hdfsfuse import cli
from hdfsfuse.client import HdfsClient, HdfsFile

_fetch_stored = HdfsClient.fetch_stored


async def _faulty_fetch_stored(self: HdfsClient, file: HdfsFile, offset: int, length: int,
                               **options: object) -> bytes | bytearray:
    path = file.path
    if "boom-read" in path:
        raise RuntimeError("injected fault in a read")
    if "boom-prefetch" in path and "_prefetch" in trio.lowlevel.current_task().name:
        raise RuntimeError("injected fault in a prefetch")
    return await _fetch_stored(self, file, offset, length, **options)  # type: ignore[arg-type]


HdfsClient.fetch_stored = _faulty_fetch_stored  # type: ignore[method-assign]

if __name__ == "__main__":
    sys.exit(cli.main())
