"""fsspec filesystems over hdfsfuse's exact-read client (needs the `fsspec` extra).

`fsspec.filesystem("hdfsfuse", host=..., port=...)`, or `fsspec.open("hdfsfuse://host:port/path")`.
"""

from hdfsfuse.fsspec.filesystem import AsyncHdfsFileSystem, HdfsFileSystem

__all__ = ["AsyncHdfsFileSystem", "HdfsFileSystem"]
